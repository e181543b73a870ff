"""The volume-based payoff baselines FGFL compares against, and an exact Shapley value.

Each baseline values agent i by a share Phi_i under the utility
Phi(S) = log(1 + sum_{j in S} |D_j|) and pays Phi_i / sum_j Phi_j * budget, the same every round.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

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
