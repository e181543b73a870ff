"""Local (self-train): each client trains on its own data only; nothing crosses the boundary.

The reference for "does federation help"; every client starts from the same initial model.
"""

from __future__ import annotations

from graphfed.algorithms.registry import ANY_LEVEL, ANY_TASK, Algorithm, register
from graphfed.messages import Message, ScalarSpec, TensorSpec
from graphfed.protocol import AlgorithmOptions, Client, ClientContext, Server
from graphfed.tensors import Params
from graphfed.training import TrainStats
from graphfed.training.step import LocalStep


class LocalOptions(AlgorithmOptions):
    pass


class LocalServer(Server):
    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        return {c: Message() for c in clients}

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        return {}, {}

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        return None


class LocalClient(Client):
    def _params(self, ctx: ClientContext) -> Params:
        return ctx.state.get("params", self.setup.initial_params)

    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep | None:
        return LocalStep(self._params(ctx))

    def finish_step(self, message: Message, ctx: ClientContext, params: Params,
                    stats: TrainStats) -> Message:
        ctx.state["params"] = params
        return Message()

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        return self.fit_by_step(message, ctx)

    def evaluated_params(self, message: Message, ctx: ClientContext) -> Params | None:
        return self._params(ctx)


LOCAL = register(Algorithm(
    "local", LocalServer, LocalClient, LocalOptions,
    family="personalized",
    levels=ANY_LEVEL,
    tasks=ANY_TASK,
    paper="baseline: no federation (self-train)",
    aliases=("self-train",),
    batched=True,
    sparse_features=True,
    description="each client trains alone (self-train)"))
