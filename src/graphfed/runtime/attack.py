"""A malicious data owner: any algorithm's client whose fit replies an attack perturbs.

The attack lives on the client side, where a real attacker sits: it trains honestly (so its
update looks like a plausible one), then changes what it sends. Wrapping the client rather than
the runtime means every runtime, the in-process engines and Flower's ClientApp alike, simulates
the same attackers. Setup and evaluation answers stay honest.
"""

from __future__ import annotations

import numpy as np
import torch

from graphfed.mechanisms.attacks import ATTACKER_STREAM, CLAIMED_SIZE, AttackOptions, perturb
from graphfed.messages import NUM_SAMPLES, Message
from graphfed.protocol import Client, ClientContext
from graphfed.tensors import Params
from graphfed.training import TrainStats
from graphfed.training.step import LocalStep


class AttackingClient(Client):
    """``inner`` for every client; for those in ``attackers`` each fit reply is attacked.

    The random attack draws its noise from a generator seeded by the call's seed (the runtime
    seeds each client call with ``seeding.reseed``, whose seed ``torch.initial_seed``
    returns), not from the stream training consumed: the sequential and batched engines and
    Flower send the same noise."""

    def __init__(self, inner: Client, attack: AttackOptions, attackers: frozenset[int]):
        super().__init__(inner.setup)
        self.inner = inner
        self.attack = attack
        self.attackers = attackers

    def answer_setup(self, message: Message, ctx: ClientContext) -> Message:
        return self.inner.answer_setup(message, ctx)

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        return self._attacked(message, ctx, self.inner.fit(message, ctx))

    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep | None:
        return self.inner.local_step(message, ctx)

    def finish_step(self, message: Message, ctx: ClientContext, params: Params,
                    stats: TrainStats) -> Message:
        return self._attacked(message, ctx, self.inner.finish_step(message, ctx, params, stats))

    def fit_by_step(self, message: Message, ctx: ClientContext) -> Message:
        return self._attacked(message, ctx, self.inner.fit_by_step(message, ctx))

    def evaluate(self, message: Message, ctx: ClientContext) -> dict[str, dict]:
        return self.inner.evaluate(message, ctx)

    def _attacked(self, received: Message, ctx: ClientContext, reply: Message) -> Message:
        if ctx.client_id not in self.attackers:
            return reply
        if self.attack.kind == "size_lie":
            return Message(reply.tensors, {**reply.scalars, NUM_SAMPLES: CLAIMED_SIZE})
        seed = np.random.SeedSequence([torch.initial_seed(), ATTACKER_STREAM])
        generator = torch.Generator().manual_seed(int(seed.generate_state(1, np.uint64)[0]))
        return Message(perturb(reply.tensors, received.tensors, self.attack, generator),
                       dict(reply.scalars))
