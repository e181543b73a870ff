"""D-FedGNN (Pei et al., "Decentralized federated graph neural networks", IJCAI 2021 FTL workshop)
as FedEgo (Zhang et al., TKDD 2023) runs it: no server, clients on a ring; after local training
each client replaces its model by the mean of its own and its two ring neighbours' models (weight
1/3 each; neighbours of i are i-1 and i+1 mod N, as in FedEgo's code).

graphfed's protocol has a server, so here it is only a relay: it keeps each client's last trained
model and forwards to client i exactly the models of i-1 and i+1 (per-client messages, nothing
aggregated, no global model). Client i averages them with its own last trained model and trains
from that average. This is the same computation as the serverless ring: the models client i would
receive from its two peers after round t are the ones the relay hands it at the start of round
t+1, and the average it evaluates after round t (evaluate messages carry the same two models) is
the one it trains from in round t+1.

Bytes, honestly: every round each sampled client uploads its model once (N|w| up) and receives two
(2N|w| down; nothing in round 1, when all models are the shared initial one). A peer-to-peer ring
moves 2N|w| in total per round (each client sends its model to two peers), so the relay's
up + down overstates it by N|w|. Evaluate messages (the same two models again) are not counted, as
for every algorithm. With partial participation a client gets its neighbours' latest models, which
may be stale; the paper's synchronous ring has full participation.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from torch import Tensor

from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.algorithms.registry import ANY_LEVEL, ANY_TASK, Algorithm, register
from graphfed.mechanisms.updates import under_prefix, with_prefix
from graphfed.messages import Message, ScalarSpec, TensorSpec, fit_scalars, spec_of
from graphfed.protocol import AlgorithmOptions, ClientContext, Server, Setup
from graphfed.tensors import Params

SIDES = ("prev", "next")


class DFedGNNOptions(AlgorithmOptions):
    topology: Literal["ring"] = Field(
        "ring", description="communication topology (FedEgo: the standard ring, 1/3 weights)")


def pack_sides(models: dict[str, Params]) -> dict[str, Tensor]:
    """Both neighbours' models in one message, as ``prev.<name>`` and ``next.<name>``."""
    out: dict[str, Tensor] = {}
    for side, params in models.items():
        out.update(with_prefix(params, f"{side}."))
    return out


def ring_neighbours(client: int, num_clients: int) -> tuple[int, int]:
    """Client ``client``'s previous and next peer on the ring."""
    return (client - 1) % num_clients, (client + 1) % num_clients


class DFedGNNServer(Server):
    """A relay: stores each client's last trained model, forwards ring neighbours' models."""

    state_keys = ("models",)

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.models: dict[int, Params] = {}

    def _neighbour(self, client: int) -> Params:
        return self.models.get(client, self.setup.initial_params)

    def message_for(self, client: int) -> Message:
        ring = ring_neighbours(client, self.setup.num_clients)
        if not any(c in self.models for c in ring):  # all still hold the initial model
            return Message()
        return Message(tensors=pack_sides({side: self._neighbour(c)
                                     for side, c in zip(SIDES, ring, strict=True)}))

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        return {c: self.message_for(c) for c in clients}

    configure_evaluate = configure_fit

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        return spec_of(self.setup.initial_params), fit_scalars()

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        for c, m in replies.items():
            self.models[c] = m.tensors


class DFedGNNClient(PersonalClient):
    """Keeps its last trained model; averages it with the two relayed ring neighbours."""

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        if not message.tensors:
            return params
        prev, nxt = (under_prefix(message.tensors, f"{side}.") for side in SIDES)
        return {k: (v + prev[k] + nxt[k]) / 3 for k, v in params.items()}

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        return self.keep(ctx, *self.local_train(self.current(message, ctx), ctx))


DFEDGNN = register(Algorithm(
    "d-fedgnn", DFedGNNServer, DFedGNNClient, DFedGNNOptions,
    family="personalized",
    levels=ANY_LEVEL,
    tasks=ANY_TASK,
    paper="Pei et al., IJCAI 2021 FTL workshop (D-FedGNN)",
    aliases=("dfedgnn",),
    description="decentralised ring averaging (1/3 self, 1/3 each neighbour), the server only "
                "relays"))
