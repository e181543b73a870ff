"""FedPer (Arivazhagan, Aggarwal, Singh, Choudhary, "Federated learning with personalization
layers", arXiv 1912.00818, 2019): the model is base layers W_B, shared, and K_P personalisation
layers W_P on top, each client's own. Algorithm 1: every selected client j trains (W_B, W_Pj)
together for its local epochs from the server's W_B and its own W_Pj, keeps W_Pj and returns
W_B; the server averages the W_B's by sample count (FedAvg on the base only).

Which layers are personal is ``personal_layers`` (K_P), counted from the output in the model's
layers (``graphfed.mechanisms.layers``: a GNN's message-passing layer, the graph model's
post-layer and readout). The paper varies K_P from 1 to 4 over its CNNs; PFLlib's FedPer (the
implementation most baselines run, ``clientper.py``) keeps the final linear layer, K_P = 1, the
default here: a node GCN's last layer, a graph model's readout.

A client deploys, and is evaluated with, the latest base it received under its own head (an
unsampled client's head stays as it was, the initial one until it first trains). There is no
global model: the server holds the base only, so nothing is scored on a global test set.
Bytes: the base, down and up.
"""

from __future__ import annotations

from typing import cast

from pydantic import Field

from graphfed.algorithms.averaging.fedavg import FedAvgOptions, FedAvgServer
from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.algorithms.registry import ANY_LEVEL, ANY_TASK, Algorithm, register
from graphfed.mechanisms.layers import top_layers
from graphfed.messages import Message
from graphfed.protocol import ClientContext, Setup
from graphfed.tensors import Params
from graphfed.training import TrainStats
from graphfed.training.step import LocalStep


class FedPerOptions(FedAvgOptions):
    personal_layers: int = Field(
        1, ge=1, description="K_P, the top layers each client keeps: the paper tries 1 to 4; "
        "PFLlib's FedPer keeps the last (1). At least one layer must stay shared")


def personal_names(setup: Setup) -> set[str]:
    """The personalisation layers' tensors (W_P) of the run's model."""
    count = cast(FedPerOptions, setup.options).personal_layers
    return set(top_layers(setup.initial_params, count, leave_one=True))


class FedPerServer(FedAvgServer):
    """FedAvg over the base layers W_B; it never sees a head."""

    def __init__(self, setup: Setup):
        super().__init__(setup)
        head = personal_names(setup)
        self.params = {k: v for k, v in self.params.items() if k not in head}

    def global_params(self) -> Params | None:
        return None  # a base without a head classifies nothing


class FedPerClient(PersonalClient):
    """Trains the received base under its own head, keeps the whole model, uploads the base."""

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.head = personal_names(setup)

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        """The received base W_B under the client's own head W_P."""
        return {k: v if k in self.head else message.tensors[k] for k, v in params.items()}

    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep:
        return LocalStep(self.current(message, ctx))

    def finish_step(self, message: Message, ctx: ClientContext, params: Params,
                    stats: TrainStats) -> Message:
        ctx.state["params"] = params
        return self.reply({k: v for k, v in params.items() if k not in self.head}, ctx, stats)

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        return self.fit_by_step(message, ctx)


FEDPER = register(Algorithm(
    "fedper", FedPerServer, FedPerClient, FedPerOptions,
    family="personalized",
    tasks=ANY_TASK,
    paper="Arivazhagan et al., arXiv 1912.00818, 2019 (FedPer)",
    levels=ANY_LEVEL,
    batched=True,
    sparse_features=True,
    description="FedAvg of the base layers; each client keeps its own top (personalisation) "
                "layers"))
