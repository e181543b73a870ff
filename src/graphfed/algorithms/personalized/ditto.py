"""Ditto (Li, Hu, Beirami, Smith, "Ditto: fair and robust federated learning through
personalization", ICML 2021). Beside the global model w, trained by FedAvg, each client k keeps
a personal model v_k solving its regularised objective (Eq. 2)

    min_v h_k(v; w*) = F_k(v) + (λ/2) ‖v − w*‖²,

with w* the global model. Algorithm 1, per round t and selected client k: w_k^t ← local
epochs of F_k from w^t (FedAvg's update, uploaded), and v_k ← v_k − η(∇F_k(v_k) + λ(v_k − w^t)),
the pull towards the global model the client received this round. The server averages the
w_k's as FedAvg does; each client deploys, and is evaluated with, its own v_k.

How it runs here: v's epochs, from the client's v with the proximal term (λ/2)‖v − w^t‖²
(FedProx's ``proximal_penalty``), run on a fork of the random state; w's epochs, from w^t as
FedAvg's client trains, then draw from the state the fork started at. So both models see the
same batch order and dropout masks (the authors' code, ``litian96/ditto``,
``flearn/trainers_MTL/ditto.py``, steps v and w in turn on the same mini-batch; here each
finishes its epochs in turn, as PFLlib's ``clientditto.py`` does), the server's model is
FedAvg's to the bit whatever λ, and with λ = 0 each v is Local's model to the bit.
The code's ``dynamic_lam`` (λ picked per client from {0.1, 1, 2} on validation loss) is not
implemented. Both models take the run's optimizer (the paper's SGD with ``optimizer.name=sgd``);
with ``optimizer.persistent`` each keeps its own state.

Bytes: w down and up, as FedAvg; nothing at evaluation (v is the client's own).
"""

from __future__ import annotations

import torch
from pydantic import Field

from graphfed.algorithms.averaging.fedavg import FedAvgOptions, FedAvgServer
from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.algorithms.registry import ANY_LEVEL, ANY_TASK, Algorithm, register
from graphfed.messages import Message
from graphfed.protocol import ClientContext, Server
from graphfed.tensors import Params
from graphfed.training.step import LocalStep

GLOBAL_MEMORY = "ditto_global"  # w's persistent optimizer state (v's is the client's own)


class DittoOptions(FedAvgOptions):
    lam: float = Field(
        1.0, ge=0.0, description="λ, the pull of the personal model towards the global one: "
        "the paper tunes it per dataset from {0.05, 0.1, 0.2, 0.5, 1, 2}; the authors' run "
        "scripts pass 1. 0: each personal model trains alone (Local)", json_schema_extra={
            "search": {"choices": [0.05, 0.1, 0.2, 0.5, 1.0, 2.0],
                       "source": "Li et al., ICML 2021 (Ditto): lambda tuned per dataset from "
                       "{0.05, 0.1, 0.2, 0.5, 1, 2}"}})
    personal_epochs: int | None = Field(
        None, ge=1, description="epochs of v per round; default (null) the run's "
        "local_epochs, as Algorithm 1 and the authors' code take as many steps of v as of w")


class DittoServer(FedAvgServer):
    """FedAvg's server; evaluation sends nothing, as each client scores its own v."""

    configure_evaluate = Server.configure_evaluate


class DittoClient(PersonalClient):
    """Trains its personal v (kept) with a pull towards w^t, then w (uploaded) from w^t."""

    options: DittoOptions

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        return params  # w^t only anchors v's pull

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        o, glob = self.options, message.tensors
        personal = LocalStep(self.own_params(ctx), o.lam, glob)
        device = ctx.trainer.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            ctx.state["params"], _ = ctx.trainer.train(
                personal.params, ctx.data, o.personal_epochs or self.setup.local_epochs,
                self.setup.batch_size, personal.extra_loss(), memory=ctx.state)
        memory = ctx.state.setdefault(GLOBAL_MEMORY, {}) if ctx.trainer.optimizer.persistent \
            else None
        w, stats = ctx.trainer.train(glob, ctx.data, self.setup.local_epochs,
                                     self.setup.batch_size, memory=memory)
        return self.reply(w, ctx, stats)


DITTO = register(Algorithm(
    "ditto", DittoServer, DittoClient, DittoOptions,
    family="personalized",
    tasks=ANY_TASK,
    paper="Li et al., ICML 2021 (Ditto)",
    levels=ANY_LEVEL,
    sparse_features=True,
    modes={"persistent": ("optimizer.persistent=true",)},
    description="FedAvg plus a personal model per client, pulled towards the global one "
                "(λ/2)‖v − w‖²"))
