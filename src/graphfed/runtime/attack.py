"""A malicious data owner: any algorithm's client whose fit replies an attack perturbs.

The attack lives on the client side, where a real attacker sits: it trains honestly (so its
update looks like a plausible one), then changes what it sends. Wrapping the client rather than
the runtime means every runtime, the in-process engines and Flower's ClientApp alike, simulates
the same attackers. Setup and evaluation answers stay honest.
"""

from __future__ import annotations

from graphfed.mechanisms.attacks import ATTACKER_STREAM, CLAIMED_SIZE, AttackOptions, perturb
from graphfed.messages import NUM_SAMPLES, Message
from graphfed.protocol import Client, ClientContext
from graphfed.runtime.wrapped import ReplyChangingClient, call_generator


class AttackingClient(ReplyChangingClient):
    """``inner`` for every client; for those in ``attackers`` each fit reply is attacked.

    The random attack draws its noise from ``call_generator``: the sequential and batched
    engines and Flower send the same noise."""

    def __init__(self, inner: Client, attack: AttackOptions, attackers: frozenset[int]):
        super().__init__(inner)
        self.attack = attack
        self.attackers = attackers

    def changed(self, received: Message, ctx: ClientContext, reply: Message) -> Message:
        if ctx.client_id not in self.attackers:
            return reply
        if self.attack.kind == "size_lie":
            return Message(reply.tensors, {**reply.scalars, NUM_SAMPLES: CLAIMED_SIZE})
        generator = call_generator(ATTACKER_STREAM)
        return Message(perturb(reply.tensors, received.tensors, self.attack, generator),
                       dict(reply.scalars))
