"""A client whose fit replies something changes after the inner client made them (the attack
simulation, DP-FedAvg's local noise): every way an engine asks for a fit, wrapped once here, so
the in-process engines and Flower's ClientApp change the same replies. Setup and evaluation
answers pass as the inner client gives them."""

from __future__ import annotations

from abc import abstractmethod

import numpy as np
import torch

from graphfed.messages import Message
from graphfed.protocol import Client, ClientContext
from graphfed.tensors import Params
from graphfed.training import TrainStats
from graphfed.training.step import LocalStep


def call_generator(stream: int) -> torch.Generator:
    """A generator seeded by the client call's seed (the runtime seeds each client call with
    ``seeding.reseed``, whose seed ``torch.initial_seed`` returns) and ``stream``, not by the
    stream training consumed: the sequential and batched engines and Flower draw the same."""
    seed = np.random.SeedSequence([torch.initial_seed(), stream])
    return torch.Generator().manual_seed(int(seed.generate_state(1, np.uint64)[0]))


class ReplyChangingClient(Client):
    """``inner`` for every client, each fit reply passed through ``changed``."""

    def __init__(self, inner: Client):
        super().__init__(inner.setup)
        self.inner = inner

    @abstractmethod
    def changed(self, received: Message, ctx: ClientContext, reply: Message) -> Message:
        """The reply that leaves, given the one ``inner`` made to ``received``."""

    def answer_setup(self, message: Message, ctx: ClientContext) -> Message:
        return self.inner.answer_setup(message, ctx)

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        return self.changed(message, ctx, self.inner.fit(message, ctx))

    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep | None:
        return self.inner.local_step(message, ctx)

    def finish_step(self, message: Message, ctx: ClientContext, params: Params,
                    stats: TrainStats) -> Message:
        return self.changed(message, ctx, self.inner.finish_step(message, ctx, params, stats))

    def fit_by_step(self, message: Message, ctx: ClientContext) -> Message:
        return self.changed(message, ctx, self.inner.fit_by_step(message, ctx))

    def evaluate(self, message: Message, ctx: ClientContext) -> dict[str, dict]:
        return self.inner.evaluate(message, ctx)
