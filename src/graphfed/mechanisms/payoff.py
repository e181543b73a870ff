"""The volume-based payoff baselines FGFL compares against, and an exact Shapley value.

Each baseline values agent i by a share Phi_i under the utility
Phi(S) = log(1 + sum_{j in S} |D_j|) and pays Phi_i / sum_j Phi_j * budget, the same every round.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

CoalitionValue = Callable[[int], float]  # bitmask of members -> value


def volume_utility(sizes: Sequence[int]) -> CoalitionValue:
    """Phi(S) = log(1 + total data of S), with S given as a bitmask over agents."""

    def value(mask: int) -> float:
        return math.log1p(sum(n for i, n in enumerate(sizes) if mask >> i & 1))

    return value


def shapley_values(num_agents: int, value: CoalitionValue) -> list[float]:
    """Exact Shapley values over all 2^n coalitions (n up to ~20)."""
    if num_agents > 20:
        raise ValueError(f"exact Shapley over 2^{num_agents} coalitions is too large")
    values = [value(mask) for mask in range(1 << num_agents)]
    weight = [math.factorial(k) * math.factorial(num_agents - k - 1) / math.factorial(num_agents)
              for k in range(num_agents)]
    phi = [0.0] * num_agents
    for mask in range(1 << num_agents):
        size = mask.bit_count()
        for i in range(num_agents):
            if not mask >> i & 1:
                phi[i] += weight[size] * (values[mask | 1 << i] - values[mask])
    return phi


def scale_to_budget(shares: Sequence[float], budget: float = 1.0) -> list[float]:
    total = sum(shares)
    if total <= 0:
        raise ValueError(f"payoff shares must have a positive sum, got {list(shares)}")
    return [s / total * budget for s in shares]


def equal_payoff(num_agents: int, budget: float = 1.0) -> list[float]:
    """Every agent gets budget / N."""
    return [budget / num_agents] * num_agents


def individual_payoff(sizes: Sequence[int], budget: float = 1.0) -> list[float]:
    """Shares proportional to Phi({i}) = log(1 + |D_i|)."""
    value = volume_utility(sizes)
    return scale_to_budget([value(1 << i) for i in range(len(sizes))], budget)


def union_payoff(sizes: Sequence[int], budget: float = 1.0) -> list[float]:
    """Shares proportional to the marginal loss Phi(N) - Phi(N minus i)."""
    value = volume_utility(sizes)
    everyone = (1 << len(sizes)) - 1
    return scale_to_budget([value(everyone) - value(everyone & ~(1 << i))
                            for i in range(len(sizes))], budget)


def shapley_payoff(sizes: Sequence[int], budget: float = 1.0) -> list[float]:
    """Shares proportional to the exact Shapley value of Phi."""
    return scale_to_budget(shapley_values(len(sizes), volume_utility(sizes)), budget)


PAYOFF_BASELINES = {
    "equal": lambda sizes, budget: equal_payoff(len(sizes), budget),
    "individual": individual_payoff,
    "union": union_payoff,
    "shapley": shapley_payoff,
}


def fgfl_payoff(values: Sequence[float], past_mean: Sequence[float] | None,
                budget: float = 1.0) -> list[float]:
    """FGFL's per-round payoff (Eqs. 5-7): r_i plus the delayed-contribution compensation
    mu_i = max(r_i - mean of r_i over earlier rounds, 0) (mu = 0 in round 1), except that a negative
    value is paid as is (punishment); then scaled to sum to ``budget``. When the payoffs do not
    sum to a positive number they are returned unscaled."""
    mu = ([0.0] * len(values) if past_mean is None
          else [max(r - m, 0.0) for r, m in zip(values, past_mean, strict=True)])
    pay = [r if r < 0 else r + u for r, u in zip(values, mu, strict=True)]
    total = sum(pay)
    return [p / total * budget for p in pay] if total > 0 else pay


def gradient_shapley(updates: Tensor, weights: Tensor, aggregate: Tensor) -> list[float]:
    """Exact gradient-Shapley values (CGSV's definition): the utility of a coalition S is the cosine
    between S's weighted aggregate and the full aggregate (0 for the empty coalition). FGFL's
    alignment cos(u_i, u_N) approximates it; this is the 2^N reference for small N."""
    import torch  # local: the volume baselines above need no torch

    n = updates.shape[0]
    w = weights.double()

    def value(mask: int) -> float:
        members = [i for i in range(n) if mask >> i & 1]
        if not members:
            return 0.0
        sub = w[members] if w[members].sum() > 0 else torch.ones(len(members), dtype=w.dtype)
        coalition = (sub.view(-1, 1) * updates[members].double()).sum(0) / sub.sum()
        return float(torch.nn.functional.cosine_similarity(coalition, aggregate.double(), dim=0,
                                                           eps=1e-10))

    return shapley_values(n, value)
