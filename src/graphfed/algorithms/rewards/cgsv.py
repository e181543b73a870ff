"""CGSV (Xu, Lyu, Ma, Miao, Foo, Low, NeurIPS 2021): an agent's value is an exponential moving
average of the cosine between its update and the aggregate (a cheap gradient-Shapley estimate);
values weigh the aggregate and size each agent's sparsified reward.
"""

from __future__ import annotations

from pydantic import Field
from torch import Tensor

from graphfed.algorithms.registry import Algorithm, register
from graphfed.algorithms.rewards.base import RewardClient, RewardOptions, RewardServer


class CGSVOptions(RewardOptions):
    alpha: float = Field(0.95, ge=0.0, lt=1.0, description="EMA weight of the previous value")
    min_value: float = Field(1e-3, ge=0.0, description="values are clamped to at least this")


class CGSVServer(RewardServer):
    options: CGSVOptions
    def similarity(self, updates: Tensor, aggregate: Tensor, alignment: Tensor) -> Tensor:
        return alignment

    def revalue(self, rnd: int, clients: list[int], updates: Tensor, aggregate: Tensor,
                alignment: Tensor) -> Tensor:
        o = self.options
        values = self.values.clone()
        values[clients] = o.alpha * values[clients] + (1 - o.alpha) * self.similarity(
            updates, aggregate, alignment)
        values = values.clamp_min(o.min_value)
        return values / values.sum()


CGSV = register(Algorithm(
    "cgsv", CGSVServer, RewardClient, CGSVOptions,
    family="rewards",
    paper="Xu et al., NeurIPS 2021 (CGSV)",
    levels=("graph", "node"),
    description="cosine-valued sparsified gradient rewards"))
