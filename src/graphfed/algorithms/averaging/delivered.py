"""FedAvg with something each client gets once from the setup exchange and trains on from then
on (FedGCN's neighbour totals, FedGNN's expansion): the server adds it to a client's messages
until a reply confirms the client holds it, so a client that was not sampled, or whose reply
was lost, still receives it; the client keeps it in ``ctx.state`` and trains and is evaluated
on the view of its data it gives."""

from __future__ import annotations

from typing import ClassVar

from torch import Tensor

from graphfed.algorithms.averaging.fedavg import FedAvgClient, FedAvgServer
from graphfed.messages import FLAG, Message, ScalarSpec, TensorSpec
from graphfed.protocol import ClientContext, Setup
from graphfed.tensors import Params
from graphfed.training import TrainStats
from graphfed.training.step import LocalStep
from graphfed.training.trainer import SplitMetrics


class DeliveringServer(FedAvgServer):
    """Sends ``payload(client)`` beside the model until ``ready_flag`` comes back true."""

    ready_flag: ClassVar[str]  # the reply scalar a client confirms with
    state_keys = (*FedAvgServer.state_keys, "ready")

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.ready: set[int] = set()

    def payload(self, client: int) -> dict[str, Tensor] | None:
        """The tensors ``client`` is to hold, or None while there are none for it."""
        raise NotImplementedError

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        spec, scalars = super().reply_spec(client)
        return spec, {**scalars, self.ready_flag: FLAG}

    def _message(self, client: int, base: Message) -> Message:
        payload = None if client in self.ready else self.payload(client)
        return base if payload is None else Message(tensors={**base.tensors, **payload})

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        base = Message(tensors=self.params)
        return {c: self._message(c, base) for c in clients}

    configure_evaluate = configure_fit

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        self.ready |= {c for c, m in replies.items() if m.scalars.get(self.ready_flag)}
        super().aggregate_fit(rnd, replies)

    def aggregate_mean(self, rnd: int, mean: Params, contributors: list[int]) -> None:
        """Under secure aggregation no reply's flag is seen; a client whose masked update was
        summed has fitted, so holds what it was sent."""
        self.ready |= {c for c in contributors if self.payload(c) is not None}
        super().aggregate_mean(rnd, mean, contributors)


class ReceivingClient(FedAvgClient):
    """Trains and is evaluated on ``view``: FedAvg's step on the data the payload gives."""

    ready_flag: ClassVar[str]
    held: ClassVar[str]  # the ctx.state key the client keeps the payload (or its result) under

    def view(self, message: Message, ctx: ClientContext) -> tuple[Message, ClientContext]:
        """``message`` without the payload (kept in ``ctx.state`` when it arrives) and ``ctx``
        showing the data the client trains on."""
        raise NotImplementedError

    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep | None:
        message, seen = self.view(message, ctx)
        return LocalStep(message.tensors, data=seen.data)

    def finish_step(self, message: Message, ctx: ClientContext, params: Params,
                    stats: TrainStats) -> Message:
        reply = super().finish_step(message, ctx, params, stats)
        reply.scalars[self.ready_flag] = self.held in ctx.state
        return reply

    def evaluate(self, message: Message, ctx: ClientContext) -> SplitMetrics:
        message, seen = self.view(message, ctx)
        return super().evaluate(message, seen)
