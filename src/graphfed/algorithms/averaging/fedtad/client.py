"""FedTAD's client: FedAvg's local epochs, its class-wise knowledge reliability (computed once
from its subgraph, ``reliability``) sent with every model."""

from __future__ import annotations

from torch import Tensor

from graphfed.algorithms.averaging.fedavg import FedAvgClient
from graphfed.algorithms.averaging.fedtad.options import FedTADOptions
from graphfed.algorithms.averaging.fedtad.reliability import class_reliability
from graphfed.algorithms.averaging.fedtad.server import RELIABILITY
from graphfed.messages import Message
from graphfed.protocol import ClientContext
from graphfed.tensors import Params
from graphfed.training import TrainStats


class FedTADClient(FedAvgClient):
    options: FedTADOptions

    def reliability(self, ctx: ClientContext) -> Tensor:
        """CKR^c of this client's subgraph, built once (``ctx.cache``: it depends on the data
        only)."""
        if RELIABILITY not in ctx.cache:
            ctx.cache[RELIABILITY] = class_reliability(ctx.node_data(), self.setup.num_classes,
                                                       self.options.walk_length)
        return ctx.cache[RELIABILITY]

    def finish_step(self, message: Message, ctx: ClientContext, params: Params,
                    stats: TrainStats) -> Message:
        return self.reply({**params, RELIABILITY: self.reliability(ctx)}, ctx, stats)
