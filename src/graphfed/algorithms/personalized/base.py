"""Clients that keep their own model across rounds (personalised or reward-based methods).

The server's answer to round t (a reward, a cluster average) can only travel with the next message
the client receives: the fit message of round t+1, or an evaluate message in between. Both carry
the same content; ``evaluate`` applies it without keeping it, ``fit`` applies it for good, so it
takes effect exactly once and the evaluated model is the one the client would train next.
"""

from __future__ import annotations

from abc import abstractmethod

from graphfed.messages import Message
from graphfed.protocol import Client, ClientContext
from graphfed.tensors import Params
from graphfed.training import TrainStats


class PersonalClient(Client):
    """Holds ``ctx.state['params']`` (initially the shared initial model)."""

    def own_params(self, ctx: ClientContext) -> Params:
        return ctx.state.get("params", self.setup.initial_params)

    @abstractmethod
    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        """``params`` after applying what the server sent (pure: no state change)."""

    def current(self, message: Message, ctx: ClientContext) -> Params:
        return self.receive(self.own_params(ctx), message, ctx)

    def evaluated_params(self, message: Message, ctx: ClientContext) -> Params:
        return self.current(message, ctx)

    def keep(self, ctx: ClientContext, trained: Params, stats: TrainStats) -> Message:
        """Keep ``trained`` as the client's model and upload all of it."""
        ctx.state["params"] = trained
        return self.reply(trained, ctx, stats)
