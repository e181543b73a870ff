"""Simulated Byzantine clients: who attacks, and what an attacker does to its reply.

The attacks are the standard ones robust aggregation is measured against: a sign-flipped update
(a client that pushes the model away from where its data points), a scaled update (model
replacement / boosting, Bagdasaryan et al., AISTATS 2020), random noise in place of the update,
and a lie about the client's size, which buys it weight in a sample-weighted mean.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, Field
from torch import Tensor

from graphfed.validation import OPTIONS

AttackKind = Literal["sign_flip", "scale", "random", "size_lie"]
DEFAULT_SCALE: dict[str, float] = {"sign_flip": 1.0, "scale": 10.0, "random": 10.0}
CLAIMED_SIZE = 10**12  # size_lie's num_samples: huge, finite, so it passes the boundary check
ATTACKER_STREAM = 0xA77AC  # keeps the attackers' draw apart from every other use of the seed


class AttackOptions(BaseModel):
    """The config section ``attack``: which share of the clients attacks, and how."""

    model_config = OPTIONS

    fraction: float = Field(0.0, ge=0.0, le=1.0, description="share of the clients that attack "
                            "(round(fraction * num_clients), chosen by the run seed)")
    kind: AttackKind = Field("sign_flip", description="sign_flip: send -scale * update; scale: "
                             "scale * update; random: Gaussian noise with scale times the "
                             "update's RMS per tensor; size_lie: honest tensors, num_samples "
                             f"claimed as {CLAIMED_SIZE:.0e}")
    scale: float | None = Field(None, gt=0.0, description="the attack's factor (None: 1 for "
                                "sign_flip, 10 for scale and random)")

    @property
    def factor(self) -> float:
        """``scale``, or the kind's default (size_lie uses none)."""
        return self.scale if self.scale is not None else DEFAULT_SCALE.get(self.kind, 1.0)


def choose_attackers(num_clients: int, fraction: float, seed: int) -> list[int]:
    """The round(fraction * num_clients) attacking clients: a draw from the run seed alone, so
    the server and every process that builds a client agree on them."""
    count = round(fraction * num_clients)
    rng = np.random.default_rng([seed, ATTACKER_STREAM])
    return sorted(int(c) for c in rng.choice(num_clients, count, replace=False))


def perturb(reply: dict[str, Tensor], received: dict[str, Tensor], options: AttackOptions,
            generator: torch.Generator) -> dict[str, Tensor]:
    """``reply``'s tensors as the attacker sends them. A float tensor that was also received
    with the same shape and dtype is a model: its update (reply - received) is attacked; any
    other float tensor is attacked itself; integer tensors (ids, counts) pass unchanged.
    ``generator`` (on the CPU) draws the random attack's noise."""
    out = {}
    for name, tensor in reply.items():
        if not tensor.is_floating_point():
            out[name] = tensor
            continue
        base = received.get(name)
        if base is None or base.shape != tensor.shape or base.dtype != tensor.dtype:
            base = torch.zeros_like(tensor)
        out[name] = base + attacked_update(tensor - base, options, generator)
    return out


def attacked_update(update: Tensor, options: AttackOptions, generator: torch.Generator
                    ) -> Tensor:
    """One tensor's update as the attack sends it (``size_lie`` leaves it honest)."""
    if options.kind == "sign_flip":
        return -options.factor * update
    if options.kind == "scale":
        return options.factor * update
    if options.kind == "random":
        rms = update.pow(2).mean().sqrt() if update.numel() else update.new_zeros(())
        noise = torch.randn(update.shape, generator=generator, dtype=update.dtype)
        return noise.to(update.device) * options.factor * rms
    return update
