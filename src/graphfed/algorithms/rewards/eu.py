"""EU (evaluated with CGSV, as FGFL describes it) is the same mechanism with a similarity from the
Euclidean distance d = ||u_i - u_N||: 1 / (1 + d). FGFL gives no formula for it; this monotone,
positive form is ours.
"""

from __future__ import annotations

from torch import Tensor

from graphfed.algorithms.registry import Algorithm, register
from graphfed.algorithms.rewards.base import RewardClient
from graphfed.algorithms.rewards.cgsv import CGSVOptions, CGSVServer


class EUServer(CGSVServer):
    def similarity(self, updates: Tensor, aggregate: Tensor, alignment: Tensor) -> Tensor:
        return 1.0 / (1.0 + (updates - aggregate.view(1, -1)).norm(dim=1))


EU = register(Algorithm(
    "eu", EUServer, RewardClient, CGSVOptions,
    family="rewards",
    paper="CGSV's Euclidean variant, as FGFL (AAAI 2024) evaluates it",
    levels=("graph", "node"),
    description="CGSV rewards valued by Euclidean distance to the aggregate"))
