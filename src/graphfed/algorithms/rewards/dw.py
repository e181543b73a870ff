"""DW (a data-weight variant evaluated with CGSV, as FGFL describes it): an agent's value is its
share of the training data, fixed for the run; it weighs the aggregate (so the aggregate is
FedAvg's) and sizes the sparsified reward."""

from __future__ import annotations

from torch import Tensor

from graphfed.algorithms.registry import Algorithm, register
from graphfed.algorithms.rewards.base import RewardClient, RewardOptions, RewardServer


class DWServer(RewardServer):
    def aggregation_weights(self, clients: list[int]) -> Tensor:
        sizes = self.data_sizes[clients]
        return sizes / sizes.sum()

    def revalue(self, rnd: int, clients: list[int], updates: Tensor, aggregate: Tensor,
                alignment: Tensor) -> Tensor:
        return self.data_sizes / self.data_sizes.sum()


DW = register(Algorithm(
    "dw", DWServer, RewardClient, RewardOptions,
    family="rewards",
    paper="data-size weights, as FGFL (AAAI 2024) evaluates them",
    levels=("graph", "node"),
    description="sparsified gradient rewards valued by data size"))
