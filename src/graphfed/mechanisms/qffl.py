"""q-FFL's server update (Li, Sanjabi, Beirami, Smith, "Fair resource allocation in federated
learning", ICLR 2020, Alg. 2 q-FedAvg), written as a weighted mean and a step.

With client k's loss F_k of the sent model w, its returned model w_k and L the Lipschitz
estimate, the paper's update is

    Delta_k = L (w - w_k),   h_k = q F_k^(q-1) ||Delta_k||^2 + L F_k^q,
    w <- w - sum_k F_k^q Delta_k / sum_k h_k.

Dividing through by L sum_k F_k^q, this is w <- w + s (m - w) with m the mean of the w_k
weighted by F_k^q and the step

    s = 1 / (1 + q L sum_k F_k^q ||w - w_k||^2 / F_k / sum_k F_k^q)  in (0, 1].

Written so, the averaging server's aggregation rule can form m, q = 0 is the uniform mean with
s = 1 exactly (FedAvg, ``weighted=false``), and only ratios F_k / max_j F_j are raised to the
power q, so no F_k^q under- or overflows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

ROW = 4096  # entries summed per thread (torch splits a sum above 32,768)
LOSS_FLOOR = 1e-10  # added to every F_k, as the reference code does (no 0^(q-1))


def qffl_weights_and_step(losses: Sequence[float], distances: Sequence[float],
                          priors: Sequence[float], q: float, lipschitz: float
                          ) -> tuple[list[float], float]:
    """The weights of the mean m (proportional to p_k F_k^q, the largest F_k's equal to its
    p_k) and the step s, from the clients' losses F_k (>= 0), squared distances
    ||w - w_k||^2 and priors p_k (1 each in the paper's Alg. 2, whose sampling supplies them)."""
    loss = torch.tensor(losses, dtype=torch.float64) + LOSS_FLOOR
    prior = torch.tensor(priors, dtype=torch.float64)
    weights = prior * (loss / loss.max()) ** q
    spread = (weights * torch.tensor(distances, dtype=torch.float64) / loss).sum()
    step = 1.0 / (1.0 + q * lipschitz * float(spread / weights.sum()))
    return weights.tolist(), step


def squared_distance(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """||a - b||^2 over every tensor, in float64, the same to the last bit on any number of CPU
    threads: torch splits one long sum between threads (so its rounding follows their number),
    but sums each row of ``ROW`` entries, below its split size, in one thread; the row sums are
    then added exactly (``math.fsum``)."""
    rows = []
    for k in a:
        flat = (a[k].double() - b[k].double()).reshape(-1) ** 2
        padded = torch.nn.functional.pad(flat, (0, -flat.numel() % ROW))
        rows.extend(padded.view(-1, ROW).sum(1).tolist())
    return math.fsum(rows)
