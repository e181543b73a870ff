"""The round logic every runtime shares; a runtime only supplies the transport.

Per round: sample clients, ask the server what each receives, deliver, check every reply at the
boundary (a malformed reply is dropped and logged, never aggregated), aggregate, count bytes.
Under ``secure_aggregation`` the fit replies are masked (``runtime.secagg``): the server gets
only their weighted mean, which takes the replies' place, and no reply reaches the boundary.
A server that needs only the sum of a payload (``SumsSetup``, ``SumsFit``) gets only the sum.

The server believes no number a client could lie about. The checks live here, in the round logic
every runtime shares, so the in-process engines and Flower drop the same replies:

* only the clients messaged this round may answer; a reply from any other is dropped;
* every tensor is a dense tensor of real values, of the name, shape and dtype the server's
  ``reply_spec`` expects; every scalar is declared there with its range (``ScalarRange``), and
  an undeclared scalar, or one out of its range, drops the reply;
* what the server knows it uses in place of the claim (logged where they differ): a reply's
  training-sample count and an evaluation's validation and test counts come from the partition
  (``Setup.client_sizes``);
* a fit reply whose update no aggregation can use (its norm overflows float32, or exceeds
  ``aggregation.max_norm_ratio`` times the round's median) is dropped;
* an evaluation's metrics are those ``protocol.METRICS`` declares, in their ranges; what is left
  is the client's word, and summaries say so (``evaluation.self_reported``).
"""

from __future__ import annotations

import logging
import math
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from graphfed.mechanisms.robust import unusable_updates, update_norms
from graphfed.messages import (
    NUM_SAMPLES,
    TRAIN_LOSS,
    Message,
    MessageError,
    check_message,
    check_metrics,
    finite_messages,
    readable,
    shown,
)
from graphfed.privacy.secure_aggregation import (
    AveragesUpdates,
    SecAggPlan,
    SecureAggregationOptions,
    SecureSum,
    SecureTotal,
    SumRequest,
    SumsFit,
    SumsSetup,
    round_plan,
    sum_plan,
)
from graphfed.protocol import SERVER_DEVICE, ClientContext, Server
from graphfed.seeding import SERVER, seeded_call
from graphfed.tensors import Params

log = logging.getLogger("graphfed.runtime")


def move_messages(messages: dict[int, Message], device: torch.device | str
                  ) -> dict[int, Message]:
    """``Message.to`` for many messages at once: each tensor name whose tensors agree in shape,
    dtype and device crosses in one stacked copy (the receiver gets views of its own copy, one
    per message) instead of one copy per message; anything else moves one by one."""
    moved = {c: Message({}, dict(m.scalars)) for c, m in messages.items()}
    names = {name for m in messages.values() for name in m.tensors}
    with torch.no_grad():  # copies that record no graph: no detach per tensor
        for name in names:
            holders = [c for c, m in messages.items() if name in m.tensors]
            tensors = [messages[c].tensors[name] for c in holders]
            first = tensors[0]
            if len(tensors) > 1 and all(t.shape == first.shape and t.dtype == first.dtype
                                        and t.device == first.device for t in tensors):
                copies = torch.stack(tensors).to(device).unbind(0)
            else:
                copies = [t.to(device, copy=True) for t in tensors]
            for c, copy in zip(holders, copies, strict=True):
                moved[c].tensors[name] = copy
    for c, m in messages.items():  # keep each message's own tensor order
        moved[c].tensors = {name: moved[c].tensors[name] for name in m.tensors}
    return moved


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
        self.evaluation_dropped: dict[int, str] = {}  # the last evaluation's dropped clients

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
    def deliver_secure_fit(self, rnd: int, messages: dict[int, Message], like: Params,
                           weights: dict[int, int], plan: SecAggPlan) -> SecureSum:
        """Send fit messages under secure aggregation (``runtime.secagg``), each client
        weighing its update of the model ``like`` by ``weights``; what the protocol
        reveals."""

    @abstractmethod
    def deliver_secure_sum(self, rnd: int, phase: str, messages: dict[int, Message],
                           shapes: list[tuple[int, ...]], plan: SecAggPlan) -> SecureTotal:
        """Send ``phase`` ("setup" or "fit") messages whose answers, tensors of ``shapes``,
        are summed under secure aggregation; what the protocol reveals."""

    @abstractmethod
    def deliver_evaluate(self, rnd: int, messages: dict[int, Message]) -> dict[int, dict]:
        """Send evaluate messages; return each answering client's metrics per split."""

    def wire_bytes(self) -> tuple[int, int] | None:
        """(up, down) payload bytes of the last delivery as they crossed a network; None where
        nothing crosses one (in-process)."""
        return None

    def _exchange(self, rnd: int, sampled: list[int], messages: dict[int, Message],
                  deliver, reply_spec, check_reply=None, bound_updates: bool = False
                  ) -> tuple[RoundRecord, dict[int, Message]]:
        """Deliver ``messages``, keep the replies that pass the boundary check (with
        ``bound_updates``, also whose updates, reply minus what the client was sent, some
        aggregation can use: ``mechanisms.robust.unusable_updates``)."""
        # the replies are checked by their update norms, taken in one pass
        _check_sent(messages)
        replies, dropped = deliver(messages)
        replies = _asked(rnd, messages, replies)
        computable = {c: m.tensors for c, m in replies.items() if readable(m)}
        norms = update_norms(computable, {c: messages[c].tensors for c in computable})
        valid = {}  # in client order, whatever order replies arrived in: aggregation that
        for client, reply in sorted(replies.items()):  # concatenates or samples sees one order
            expected, scalars = reply_spec(client)
            try:
                self._with_known_size(rnd, client, reply)
                check_message(reply, expected, scalars, sender=f"client {client}",
                              finite=math.isfinite(norms.get(client, math.nan)))
                if check_reply is not None:
                    check_reply(client, reply)
            except MessageError as e:
                dropped[client] = _dropped(rnd, client, str(e))
                continue
            valid[client] = reply
        if bound_updates:
            ratio = self.server.setup.aggregation.max_norm_ratio
            for client, why in unusable_updates({c: norms[c] for c in valid}, ratio).items():
                dropped[client] = _dropped(rnd, client, f"client {client}: {why}")
                del valid[client]
        if messages and not valid:
            reasons = "; ".join(f"client {c}: {why}" for c, why in sorted(dropped.items()))
            raise RoundFailed(f"round {rnd}: no client returned a valid reply ({reasons})")
        losses = [float(m.scalars[TRAIN_LOSS]) for m in valid.values()
                  if TRAIN_LOSS in m.scalars]
        record = RoundRecord(
            round=rnd, sampled=sampled, answered=sorted(valid), dropped=dropped,
            bytes_up=sum(_payload(m) for m in replies.values()),
            bytes_down=sum(m.nbytes for m in messages.values()),
            train_loss=sum(losses) / len(losses) if losses else None,
            wire_bytes=self.wire_bytes())
        return record, valid

    def _with_known_size(self, rnd: int, client: int, reply: Message) -> None:
        """Replace ``reply``'s training-sample count by the partition's (a differing claim is
        logged): the aggregation weight is never the client's word. Before the boundary check,
        so a claim is not refused for a value nothing reads."""
        sizes = self.server.setup.client_sizes
        if not (sizes and isinstance(reply, Message) and isinstance(reply.scalars, dict)
                and NUM_SAMPLES in reply.scalars):
            return
        known, claimed = sizes[client].train, reply.scalars[NUM_SAMPLES]
        if not (isinstance(claimed, (int, float)) and claimed == known):
            log.warning("round %d: client %d claimed %s training samples; the partition gives "
                        "%d, which is used", rnd, client, shown(claimed), known)
        reply.scalars[NUM_SAMPLES] = known

    def _with_known_counts(self, rnd: int, client: int, metrics: Any) -> Any:
        """``metrics`` (an evaluate reply) with each split's sample count replaced by the
        partition's where the server knows it (a differing claim is logged), as
        ``_with_known_size`` does for training: a client cannot weigh its accuracy into a
        pooled one by claiming more samples."""
        sizes = self.server.setup.client_sizes
        if not sizes or not isinstance(metrics, dict):
            return metrics
        out = dict(metrics)
        for split, values in metrics.items():
            known = sizes[client].samples(split)
            if known is None or not isinstance(values, dict) or "n" not in values:
                continue
            claimed = values["n"]
            if not (isinstance(claimed, (int, float)) and claimed == known):
                log.warning("round %d: client %d claimed %s %s samples; the partition gives "
                            "%d, which is used", rnd, client, shown(claimed), split, known)
            out[split] = {**values, "n": known}
        return out

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
        secure, server = self.server.setup.secure_aggregation, self.server
        if secure is None or not isinstance(server, SumsSetup):
            return record
        request = server.configure_setup_sum(sorted(valid))
        if request is None:
            return record
        summed, total = self._secure_sum(0, "setup", request, secure)
        server.aggregate_setup_sum(total, summed.answered)
        return RoundRecord(round=0, sampled=record.sampled, answered=summed.answered,
                           dropped={**record.dropped, **summed.dropped},
                           bytes_up=record.bytes_up + summed.bytes_up,
                           bytes_down=record.bytes_down + summed.bytes_down,
                           wire_bytes=_added(record.wire_bytes, summed.wire_bytes))

    def _secure_sum(self, rnd: int, phase: str, request: SumRequest,
                    options: SecureAggregationOptions) -> tuple[RoundRecord, Params]:
        """A payload the server needs only the sum of, summed under secure aggregation: the
        round's record and the total (``SumRequest``)."""
        _check_sent(request.messages)
        plan = sum_plan(options, len(request.messages), request.bound)
        outcome = self.deliver_secure_sum(rnd, phase, request.messages,
                                          list(request.shapes.values()), plan)
        record = RoundRecord(round=rnd, sampled=sorted(request.messages),
                             answered=outcome.contributors, dropped=outcome.dropped,
                             bytes_up=outcome.bytes_up,
                             bytes_down=sum(m.nbytes for m in request.messages.values()),
                             train_loss=outcome.train_loss, wire_bytes=outcome.wire)
        return record, outcome.as_params(request.shapes)

    def fit_round(self, rnd: int) -> RoundRecord:
        with seeded_call(self.seed, rnd, SERVER, "fit"):
            return self._fit_round(rnd)

    def _fit_round(self, rnd: int) -> RoundRecord:
        sampled = self.sample_clients()
        secure, server = self.server.setup.secure_aggregation, self.server
        if secure is not None and isinstance(server, SumsFit):
            record, total = self._secure_sum(rnd, "fit", server.configure_fit_sum(rnd, sampled),
                                             secure)
            server.aggregate_fit_sum(rnd, total, record.answered)
            return record
        messages = server.configure_fit(rnd, sampled)
        if secure is not None:
            return self._secure_fit_round(rnd, sampled, messages, secure)
        record, valid = self._exchange(rnd, sampled, messages,
                                       lambda m: self.deliver_fit(rnd, m), self.server.reply_spec,
                                       self.server.check_reply, bound_updates=True)
        self.server.aggregate_fit(rnd, valid)
        return record

    def _secure_fit_round(self, rnd: int, sampled: list[int], messages: dict[int, Message],
                          options: SecureAggregationOptions) -> RoundRecord:
        """The fit exchange under secure aggregation: the server gets the clients' updates only
        as their weighted mean (``deliver_secure_fit``), which takes the replies' place. No
        reply is checked at the boundary, since none is seen: the clipping range bounds what
        each client adds instead."""
        _check_sent(messages)
        server = cast(AveragesUpdates, self.server)
        weights = server.secure_weights(sampled)
        plan = round_plan(options, len(sampled), max(weights.values()))
        model, _ = self.server.reply_spec(sampled[0])  # what a client returns: the model
        sent = messages[sampled[0]].tensors
        like = {name: sent[name] for name in sent if model is None or name in model}
        outcome = self.deliver_secure_fit(rnd, messages, like, weights, plan)
        server.aggregate_mean(rnd, outcome.mean_update(like), outcome.contributors)
        return RoundRecord(round=rnd, sampled=sampled, answered=outcome.contributors,
                           dropped=outcome.dropped, bytes_up=outcome.bytes_up,
                           bytes_down=sum(m.nbytes for m in messages.values()),
                           train_loss=outcome.train_loss, wire_bytes=outcome.wire)

    def evaluate_round(self, rnd: int) -> dict[int, dict]:
        """Each answering client's metrics per split, those that pass the boundary check
        (``messages.check_metrics``); the others are dropped, logged and kept with why in
        ``evaluation_dropped``, and the evaluation goes on without them."""
        with seeded_call(self.seed, rnd, SERVER, "evaluate"):
            messages = self.server.configure_evaluate(rnd, list(range(self.num_clients)))
            results = _asked(rnd, messages, self.deliver_evaluate(rnd, messages))
        valid, self.evaluation_dropped = {}, {}
        for client, metrics in results.items():
            metrics = self._with_known_counts(rnd, client, metrics)
            try:
                check_metrics(metrics, sender=f"client {client}")
            except MessageError as e:
                self.evaluation_dropped[client] = str(e)
                log.warning("round %d: dropped evaluation of client %d: %s", rnd, client, e)
                continue
            valid[client] = metrics
        return valid

    def state_dict(self) -> dict:
        return {"rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict) -> None:
        self.rng.bit_generator.state = state["rng"]


def _added(a: tuple[int, int] | None, b: tuple[int, int] | None) -> tuple[int, int] | None:
    """Two exchanges' (up, down) wire bytes together (None where neither crossed a network)."""
    if a is None or b is None:
        return a or b
    return a[0] + b[0], a[1] + b[1]


def _check_sent(messages: dict[int, Message]) -> None:
    """The boundary check of what the server sends: a message sent to many clients is checked
    once, all of them for finite values in one pass."""
    distinct: dict[int, tuple[int, Message]] = {}
    for client, message in messages.items():
        distinct.setdefault(id(message), (client, message))
    finite = finite_messages({key: m for key, (_, m) in distinct.items()})
    for key, (client, message) in distinct.items():
        check_message(message, sender=f"server -> client {client}", finite=key in finite)


def _asked(rnd: int, messages: dict[int, Any], replies: dict[Any, Any]) -> dict[int, Any]:
    """The ``replies`` of clients that were sent ``messages`` this round, under the server's
    own client ids; a reply from any other sender (an unknown id, a client not sampled) is
    dropped and logged, never checked or aggregated."""
    for sender in replies:
        if sender not in messages:
            log.warning("round %d: dropped a reply from %s, which was not asked this round",
                        rnd, shown(sender))
    return {c: replies[c] for c in messages if c in replies}


def _dropped(rnd: int, client: int, why: str) -> str:
    """Log a reply dropped at the boundary; the reason its round record keeps."""
    log.warning("round %d: dropped reply of client %d: %s", rnd, client, why)
    return why


def _payload(reply: Any) -> int:
    """A reply's payload bytes (``Message.nbytes``), 0 for one whose tensors are not all
    tensors (it is dropped, and has no size to count)."""
    if not (isinstance(reply, Message) and isinstance(reply.tensors, dict)
            and isinstance(reply.scalars, dict)
            and all(isinstance(t, Tensor) for t in reply.tensors.values())):
        return 0
    return reply.nbytes
