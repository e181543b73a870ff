"""RFFL (Xu & Lyu, "A reputation mechanism is all you need", 2021), the method FGFL's tables call
"CFFL": an EMA reputation of the cosine between each agent's update and the aggregate; agents whose
reputation falls below ``threshold / |R|`` leave the reputable set R for good (no weight, no
reward); the others receive a share of the aggregate proportional to reputation (r_i / max r)."""

from __future__ import annotations

import torch
from pydantic import Field
from torch import Tensor

from graphfed.algorithms.registry import Algorithm, register
from graphfed.algorithms.rewards.base import RewardClient, RewardOptions, RewardServer
from graphfed.mechanisms.sparse_rewards import RewardShape
from graphfed.protocol import Setup


class RFFLOptions(RewardOptions):
    alpha: float = Field(0.95, ge=0.0, lt=1.0, description="EMA weight of the previous value")
    threshold: float = Field(1.0 / 3.0, ge=0.0, description="removal below threshold / |R|")
    reward_shape: RewardShape = Field(
        "linear", description="RFFL's r / max r; tanh: FGFL's baselines, which beta sharpens")


class RFFLServer(RewardServer):
    options: RFFLOptions
    state_keys = (*RewardServer.state_keys, "reputable")

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.reputable = torch.ones(setup.num_clients, dtype=torch.bool)

    def revalue(self, rnd: int, clients: list[int], updates: Tensor, aggregate: Tensor,
                alignment: Tensor) -> Tensor:
        o = self.options
        values = self.values.clone()
        values[clients] = o.alpha * values[clients] + (1 - o.alpha) * alignment
        while True:
            self.reputable &= values > 0
            values = torch.where(self.reputable, values, torch.zeros_like(values))
            if values.sum() <= 0:
                return values
            values = values / values.sum()
            low = self.reputable & (values < o.threshold / int(self.reputable.sum()))
            if not low.any():
                return values
            self.reputable &= ~low


RFFL = register(Algorithm(
    "cffl", RFFLServer, RewardClient, RFFLOptions,
    family="rewards",
    paper="Xu & Lyu, 2021 (RFFL; FGFL's 'CFFL')",
    levels=("graph", "node"),
    aliases=("rffl",),
    description="reputation-based fairness (RFFL; FGFL's 'CFFL')"))
