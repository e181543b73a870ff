"""The round logic every runtime shares; a runtime only supplies the transport.

Per round: sample clients, ask the server what each receives, deliver, check every reply at the
boundary (a malformed reply is dropped and logged, never aggregated), aggregate, count bytes. The
server believes no number a client could lie about: a reply's training-sample count is replaced
by the one the partition gives (``Setup.client_sizes``).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphfed.protocol import (
    NUM_SAMPLES,
    SERVER_DEVICE,
    TRAIN_LOSS,
    ClientContext,
    Message,
    MessageError,
    Server,
    check_message,
    finite_messages,
)
from graphfed.seeding import SERVER, seeded_call

log = logging.getLogger("graphfed.runtime")


def answer_on_client(answer: Callable[[Message, ClientContext], Any], message: Message,
                     ctx: ClientContext) -> Any:
    """A client's answer computed on its own device: ``message`` arrives there as a copy, and a
    reply Message leaves on the server's device (a metrics dict passes as it is)."""
    reply = answer(message.to(ctx.trainer.device), ctx)
    return reply.to(SERVER_DEVICE) if isinstance(reply, Message) else reply


def clients_per_round(client_fraction: float, num_clients: int) -> int:
    """How many clients a round samples: the fraction of them, at least one."""
    return max(1, round(client_fraction * num_clients))


class RoundFailed(RuntimeError):
    """Every sampled client failed or sent a malformed reply: nothing to aggregate."""


@dataclass
class RoundRecord:
    round: int
    sampled: list[int]
    answered: list[int]
    dropped: dict[int, str] = field(default_factory=dict)
    bytes_up: int = 0
    bytes_down: int = 0
    train_loss: float | None = None
    wire_bytes: tuple[int, int] | None = None  # (up, down) as they crossed a network, if any


class Runtime(ABC):
    """Drives a server and its clients through rounds; subclasses deliver the messages."""

    def __init__(self, server: Server, num_clients: int, client_fraction: float, seed: int):
        self.server = server
        self.num_clients = num_clients
        self.client_fraction = client_fraction
        self.seed = seed
        self.rng = np.random.default_rng(seed)

    def sample_clients(self) -> list[int]:
        count = clients_per_round(self.client_fraction, self.num_clients)
        if count >= self.num_clients:
            return list(range(self.num_clients))
        return sorted(int(c) for c in self.rng.choice(self.num_clients, count, replace=False))

    @abstractmethod
    def deliver_fit(self, rnd: int, messages: dict[int, Message]
                    ) -> tuple[dict[int, Message], dict[int, str]]:
        """Send fit messages; return the replies received and the clients that failed (why)."""

    @abstractmethod
    def deliver_setup(self, messages: dict[int, Message]
                      ) -> tuple[dict[int, Message], dict[int, str]]:
        """Send setup messages; return the replies received and the clients that failed."""

    @abstractmethod
    def deliver_evaluate(self, rnd: int, messages: dict[int, Message]) -> dict[int, dict]:
        """Send evaluate messages; return each answering client's metrics per split."""

    def wire_bytes(self) -> tuple[int, int] | None:
        """(up, down) payload bytes of the last delivery as they crossed a network; None where
        nothing crosses one (in-process)."""
        return None

    def _exchange(self, rnd: int, sampled: list[int], messages: dict[int, Message],
                  deliver, reply_spec, check_reply=None
                  ) -> tuple[RoundRecord, dict[int, Message]]:
        """Deliver ``messages``, keep the replies that pass the boundary check."""
        # a message sent to many clients is checked once; all are checked for finite values
        # in one pass, and so are all the replies
        distinct: dict[int, tuple[int, Message]] = {}
        for client, message in messages.items():
            distinct.setdefault(id(message), (client, message))
        finite = finite_messages({key: m for key, (_, m) in distinct.items()})
        for key, (client, message) in distinct.items():
            check_message(message, sender=f"server -> client {client}", finite=key in finite)
        replies, dropped = deliver(messages)
        finite = finite_messages(replies)
        valid = {}  # in client order, whatever order replies arrived in: aggregation that
        for client, reply in sorted(replies.items()):  # concatenates or samples sees one order
            expected, scalars = reply_spec(client)
            try:
                check_message(reply, expected, scalars, sender=f"client {client}",
                              finite=client in finite)
                if check_reply is not None:
                    check_reply(client, reply)
            except MessageError as e:
                log.warning("round %d: dropped reply of client %d: %s", rnd, client, e)
                dropped[client] = str(e)
                continue
            valid[client] = self._with_known_size(rnd, client, reply)
        if messages and not valid:
            reasons = "; ".join(f"client {c}: {why}" for c, why in sorted(dropped.items()))
            raise RoundFailed(f"round {rnd}: no client returned a valid reply ({reasons})")
        losses = [float(m.scalars[TRAIN_LOSS]) for m in valid.values()
                  if TRAIN_LOSS in m.scalars]
        record = RoundRecord(
            round=rnd, sampled=sampled, answered=sorted(valid), dropped=dropped,
            bytes_up=sum(m.nbytes for m in replies.values() if isinstance(m, Message)),
            bytes_down=sum(m.nbytes for m in messages.values()),
            train_loss=sum(losses) / len(losses) if losses else None,
            wire_bytes=self.wire_bytes())
        return record, valid

    def _with_known_size(self, rnd: int, client: int, reply: Message) -> Message:
        """``reply`` with its training-sample count replaced by the partition's (a differing
        claim is logged): the aggregation weight is never the client's word."""
        sizes = self.server.setup.client_sizes
        if NUM_SAMPLES not in reply.scalars or not sizes:
            return reply
        known, claimed = sizes[client].train, reply.scalars[NUM_SAMPLES]
        if claimed != known:
            log.warning("round %d: client %d claimed %r training samples; the partition gives "
                        "%d, which is used", rnd, client, claimed, known)
        reply.scalars[NUM_SAMPLES] = known
        return reply

    def setup_round(self) -> RoundRecord | None:
        """The algorithm's one-off exchange before round 1 (round 0), if it has one."""
        with seeded_call(self.seed, 0, SERVER, "setup"):
            return self._setup_round()

    def _setup_round(self) -> RoundRecord | None:
        everyone = list(range(self.num_clients))
        messages = self.server.configure_setup(everyone)
        if not messages:
            return None
        record, valid = self._exchange(0, everyone, messages, self.deliver_setup,
                                       self.server.setup_reply_spec,
                                       self.server.check_setup_reply)
        self.server.aggregate_setup(valid)
        return record

    def fit_round(self, rnd: int) -> RoundRecord:
        with seeded_call(self.seed, rnd, SERVER, "fit"):
            return self._fit_round(rnd)

    def _fit_round(self, rnd: int) -> RoundRecord:
        sampled = self.sample_clients()
        messages = self.server.configure_fit(rnd, sampled)
        record, valid = self._exchange(rnd, sampled, messages,
                                       lambda m: self.deliver_fit(rnd, m), self.server.reply_spec,
                                       self.server.check_reply)
        self.server.aggregate_fit(rnd, valid)
        return record

    def evaluate_round(self, rnd: int) -> dict[int, dict]:
        with seeded_call(self.seed, rnd, SERVER, "evaluate"):
            messages = self.server.configure_evaluate(rnd, list(range(self.num_clients)))
            return self.deliver_evaluate(rnd, messages)

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]
