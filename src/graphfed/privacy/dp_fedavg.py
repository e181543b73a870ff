"""DP-FedAvg (McMahan, Ramage, Talwar, Zhang, "Learning differentially private recurrent
language models", ICLR 2018) with adaptive clipping (Andrew, Thakkar, McMahan, Ramaswamy,
"Differentially private learning with adaptive clipping", NeurIPS 2021, Alg. 1).

Each client's update (its reply minus the model it was sent) is clipped to L2 norm C; the
clipped updates are summed, Gaussian noise of std z C is added, and the sum is divided by the
number of clients a round samples, m, fixed in advance. The mean is uniform on purpose: adding
or removing one client then moves the sum by at most C, whatever the others hold. A weighted
mean gives client i the share n_i / sum_j n_j, which depends on every client's data: one
client's removal rescales everyone's share, and a client with many samples moves the mean by
nearly its whole update, so no fixed noise covers the change.

With ``where=client`` each client adds N(0, (z C)^2) to its own clipped update before it
leaves (``graphfed.runtime.dp_client``) and the server only averages uniformly: the server
never sees an update un-noised, at the price of sqrt(m) times the noise on the mean.

Noise is drawn from a generator seeded from torch's stream, which the runtime seeds per round
and party (``seeding.seeded_call``): in-process and on Flower the server draws the same noise.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from torch import Tensor

from graphfed.mechanisms.updates import flatten, unflatten
from graphfed.privacy.ledger import Release
from graphfed.privacy.options import DPOptions, count_stddev, update_noise_multiplier
from graphfed.tensors import Params

MESSAGE = "dp_fedavg.update"  # the ledger's name for the noised model updates


def clip_rows(updates: Tensor, clip: float) -> tuple[Tensor, Tensor]:
    """Every row of ``updates`` scaled to L2 norm <= ``clip``, and the rows' norms before."""
    norms = updates.norm(dim=1)
    factors = (clip / norms.clamp_min(1e-300)).clamp(max=1.0)
    return updates * factors.unsqueeze(1), norms


def noised_mean(updates: Tensor, clip: float, noise_multiplier: float, denominator: int,
                generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """(sum of the rows clipped to ``clip`` + N(0, (noise_multiplier clip)^2)) / denominator,
    and the rows' norms before clipping."""
    clipped, norms = clip_rows(updates, clip)
    total = clipped.sum(0)
    if noise_multiplier > 0:
        total = total + noise_multiplier * clip * torch.randn(
            total.shape, generator=generator, dtype=total.dtype)
    return total / denominator, norms


def adapted_clip(clip: float, norms: Tensor, options: DPOptions, expected: int,
                 generator: torch.Generator) -> float:
    """Andrew et al. Alg. 1: the share of updates within ``clip``, counted with Gaussian noise
    of std sigma_b (part of the run's privacy cost), moves C geometrically towards the
    ``target_quantile`` of the update norms: C exp(-eta (b - gamma))."""
    within = float((norms <= clip).sum())
    if options.noise_multiplier:
        within += count_stddev(options, expected) * float(
            torch.randn((), generator=generator, dtype=torch.float64))
    share = within / expected
    return clip * math.exp(-options.clip_lr * (share - options.target_quantile))


def server_generator() -> torch.Generator:
    """A generator seeded from torch's (per-round seeded) stream: a second call in the same
    round draws a different seed, so two releases never share their noise."""
    return torch.Generator().manual_seed(int(torch.randint(2**62, ())))


def dp_release(options: DPOptions, expected: int, num_clients: int) -> Release:
    """The release one DP-FedAvg aggregation makes: Gaussian, noise multiplier z on a sample of
    m of the N clients. Adaptive clipping's count is inside z (``update_noise_multiplier``).
    The local variant is accounted at z / 2 without sampling: the server sees who was sampled
    (no amplification), and one client's clipped update moves by up to 2C when its data are
    replaced."""
    z = options.noise_multiplier or 0.0
    if options.where == "client":
        return Release(MESSAGE, "gaussian", noise_multiplier=z / 2)
    return Release(MESSAGE, "gaussian", noise_multiplier=z, sampling_rate=expected / num_clients)


class DPAggregator:
    """What an averaging server's aggregation becomes under ``dp``: the clip state and the
    release each aggregation makes. ``expected``: the clients a round samples (m);
    ``num_clients``: all of them, so the sampling rate is m / N."""

    def __init__(self, options: DPOptions, expected: int, num_clients: int):
        self.options = options
        self.expected = expected
        self.clip = options.clip
        self.update_noise = update_noise_multiplier(options, expected)
        self.release = dp_release(options, expected, num_clients)

    def average(self, models: Sequence[Params], reference: Params | None) -> Params:
        """The uniform DP mean of ``models``' updates from ``reference`` (None: the models are
        updates themselves), added back to ``reference``."""
        names = list(models[0])
        stacked = torch.stack([flatten({k: m[k].double() for k in names}, names)
                               for m in models])
        base = (flatten({k: reference[k].double() for k in names}, names)
                if reference is not None else torch.zeros_like(stacked[0]))
        if self.options.where == "client":  # clipped and noised by the clients
            vector = (stacked - base).mean(0)
        else:
            generator = server_generator()
            vector, norms = noised_mean(stacked - base, self.clip, self.update_noise,
                                        self.expected, generator)
            if self.options.clipping == "adaptive":
                self.clip = adapted_clip(self.clip, norms, self.options, self.expected,
                                         generator)
        out = unflatten(base + vector, models[0], names)
        return {k: v.to(models[0][k].dtype) for k, v in out.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"clip": self.clip}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clip = float(state["clip"])
