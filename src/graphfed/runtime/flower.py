"""The Flower transport: a ``Runtime`` whose messages travel through a Flower ``Grid``.

The round logic (sampling, boundary checks, aggregation, byte counts) is the shared one of
``runtime/base.py``; this module only turns graphfed messages into Flower messages for the right
node and back. A node that errs, dies or misses ``flower.round_timeout`` (always finite, so a hung
ClientApp costs one bounded wait) is dropped for the round; fewer than ``flower.min_replies`` fit
replies re-asks the missing clients ``flower.retries`` times, then stops the run with a clear
message. The ServerApp that hosts it is ``graphfed.flower``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any, TypeVar

from flwr.app import ConfigRecord, RecordDict
from flwr.app import Message as FlowerMessage
from flwr.serverapp import Grid

from graphfed.errors import GraphfedError
from graphfed.messages import Message, MessageError
from graphfed.privacy.secure_aggregation import SecAggPlan
from graphfed.protocol import Server
from graphfed.runtime import records, secagg
from graphfed.runtime.base import RoundFailed, Runtime
from graphfed.runtime.flower_options import FlowerOptions
from graphfed.runtime.identity import claim_is_signed, new_challenge

log = logging.getLogger("graphfed.runtime.flower")
MESSAGE_TYPES = {"setup": "train.setup", "fit": "train", "evaluate": "evaluate"}
T = TypeVar("T")


def discover_clients(grid: Grid, num_clients: int, wait: float, partition_id: str,
                     control: dict, owner_keys: dict[int, str] | None = None
                     ) -> dict[int, int]:
    """Graphfed client id -> Flower node id, once every client's node has connected.

    Each node is sent a fresh challenge and answers with the client it holds and the partition
    its data comes from. A node that names no partition, or another partition than the run's,
    is refused (its numbers would be silently wrong); with ``owner_keys`` a node is client i
    only if it signed the challenge with owner i's private key (``runtime.identity``)."""
    deadline = time.monotonic() + wait
    while len(nodes := list(grid.get_node_ids())) < num_clients:
        if time.monotonic() > deadline:
            raise GraphfedError(f"only {len(nodes)} of {num_clients} SuperNodes connected "
                                f"within {wait:.0f}s")
        time.sleep(0.5)
    challenges = {node: new_challenge() for node in nodes}
    asks = [FlowerMessage(RecordDict({records.CONTROL: ConfigRecord(
                {**control, "challenge": challenges[node]})}), node, "query",
                group_id="discover") for node in nodes]
    mapping: dict[int, int] = {}
    replies = list(grid.send_and_receive(asks, timeout=wait))
    for reply in replies:
        node = reply.metadata.src_node_id
        if reply.has_error():
            raise GraphfedError(f"node {node} could not say which client it is: "
                                f"{reply.error.reason}")
        client, held = _identity(reply, node, num_clients)
        if held != partition_id:
            raise GraphfedError(
                f"the SuperNode of client {client} holds a file of partition {held}, but this "
                f"run's partition is {partition_id}: export the owners' files for this config "
                f"and seed (graphfed federation export) and restart the nodes on them")
        if owner_keys is not None and not claim_is_signed(
                owner_keys[client], challenges[node], client, held,
                bytes(reply.content.config_records[records.CONTROL].get("signature", b""))):
            raise GraphfedError(
                f"the SuperNode claiming client {client} did not prove it holds owner "
                f"{client}'s private key (no valid signature of the server's challenge): it is "
                f"another owner's node, or it was started with another key than owner-{client}")
        if client in mapping:
            raise GraphfedError(f"two SuperNodes both hold client {client}'s data")
        mapping[client] = node
    missing = sorted(set(range(num_clients)) - set(mapping))
    if missing and len(replies) < len(asks):
        raise GraphfedError(f"only {len(replies)} of {len(asks)} connected SuperNodes said "
                            f"which client they hold within {wait:.0f}s (clients {missing} "
                            "unaccounted for): a node is overloaded or stuck; try again")
    if missing:
        raise GraphfedError(f"no connected SuperNode holds clients {missing}")
    return mapping


def _identity(reply: FlowerMessage, node: int, num_clients: int) -> tuple[int, str]:
    """The client id and partition a node's answer claims, both required and well formed."""
    answer = reply.content.config_records.get(records.CONTROL)
    client = None if answer is None else answer.get("client")
    held = None if answer is None else answer.get("partition")
    if not isinstance(client, int) or isinstance(client, bool) or not 0 <= client < num_clients:
        raise GraphfedError(f"node {node} named no valid client id ({client!r}); the run has "
                            f"clients 0..{num_clients - 1}")
    if not isinstance(held, str) or not held:
        raise GraphfedError(f"the SuperNode of client {client} named no partition: it cannot "
                            "show its data belongs to this run")
    return client, held


class FlowerRuntime(Runtime):
    """Delivers each client's own message to its node through ``grid``."""

    def __init__(self, server: Server, grid: Grid, options: FlowerOptions, num_clients: int,
                 client_fraction: float, seed: int, config_text: str, partition_id: str,
                 owner_keys: dict[int, str] | None = None):
        super().__init__(server, num_clients, client_fraction, seed)
        self.grid = grid
        self.options = options
        self.config_text = config_text  # each node builds its client from the run's config
        self.nodes = discover_clients(grid, num_clients, options.connect_timeout, partition_id,
                                      {"config": config_text, "seed": seed}, owner_keys)
        self._wire = (0, 0)

    def wire_bytes(self) -> tuple[int, int]:
        return self._wire

    def _exchange_with_nodes(self, out: dict[int, FlowerMessage]
                             ) -> list[tuple[int, FlowerMessage]]:
        """Push, then pull replies until all came or ``round_timeout`` passed. Replies are
        matched by the message they answer: the SuperLink itself answers for a node it lost."""
        ids = list(self.grid.push_messages(list(out.values())))
        asked = dict(zip(ids, out, strict=True))
        deadline = time.monotonic() + self.options.round_timeout
        got: list[tuple[int, FlowerMessage]] = []
        while asked and time.monotonic() < deadline:
            for reply in self.grid.pull_messages(list(asked)):
                got.append((asked.pop(reply.metadata.reply_to_message_id), reply))
            if asked:
                time.sleep(0.2)
        return got

    def _send(self, phase: str, rnd: int, messages: dict[int, Message]
              ) -> tuple[dict[int, FlowerMessage], dict[int, str]]:
        """One exchange with every addressed node, re-asking missing ones for fit/setup."""
        control = {"config": self.config_text, "seed": self.seed, "round": rnd}
        needed = min(self.options.min_replies, len(messages)) if phase != "evaluate" else 0
        replies: dict[int, FlowerMessage] = {}
        failed: dict[int, str] = {}
        pending = dict(messages)
        down = 0
        for attempt in range(self.options.retries + 1):
            contents = {c: records.encode(m, control) for c, m in pending.items()}
            down += sum(records.wire_nbytes(content) for content in contents.values())
            out = {c: FlowerMessage(content, self.nodes[c], MESSAGE_TYPES[phase],
                                    group_id=f"seed-{self.seed}-round-{rnd}")
                   for c, content in contents.items()}
            for client, reply in self._exchange_with_nodes(out):
                if reply.has_error():
                    failed[client] = f"node error: {reply.error.reason}"
                else:
                    replies[client] = reply
                    failed.pop(client, None)
            pending = {c: m for c, m in pending.items() if c not in replies}
            for client in pending:
                failed.setdefault(client, f"no reply within {self.options.round_timeout:g}s "
                                          "(flower.round_timeout)")
            if not pending or len(replies) >= needed:
                break
            if attempt < self.options.retries:
                log.warning("round %d: %d of %d %s replies (min_replies=%d); re-asking clients "
                            "%s", rnd, len(replies), len(messages), phase, needed, sorted(pending))
        for client, why in sorted(failed.items()):
            log.warning("round %d: client %d dropped from %s: %s", rnd, client, phase, why)
        if len(replies) < needed:
            raise RoundFailed(f"round {rnd}: only {len(replies)} of {len(messages)} clients "
                              f"answered (flower.min_replies={needed}, after "
                              f"{self.options.retries} retries); missing clients "
                              f"{sorted(failed)}")
        up = sum(records.wire_nbytes(r.content) for r in replies.values()
                 if phase != "evaluate")
        self._wire = (up, down)
        return replies, failed

    def deliver_setup(self, messages):
        return _decoded(0, "setup", *self._send("setup", 0, messages), records.decode)

    def deliver_fit(self, rnd, messages):
        return _decoded(rnd, "fit", *self._send("fit", rnd, messages), records.decode)

    def deliver_secure_fit(self, rnd, messages, like, weights, plan):
        """The fit phase as Flower's SecAgg+ stages (``runtime.secagg``): each client's fit
        message, with its weight, travels in the stage that collects the masked vectors; no
        reply is decoded, the server holds only masked vectors and their unmasked sum."""
        shapes = [*(tuple(t.shape) for t in like.values()), (1,)]
        return self._stages(rnd, messages, {secagg.WEIGHT: weights}, shapes, plan).means(plan)

    def deliver_secure_sum(self, rnd, phase, messages, shapes, plan):
        """A secure sum through the same stages: each client's request, marked as one whose
        ``phase`` answer is summed, travels in the stage that collects the masked vectors
        (a fit message, the kind Flower's mod acts on, also for the setup exchange)."""
        with_loss = phase == "fit"
        unmasked = self._stages(rnd, messages, {secagg.SUMMED: {c: phase for c in messages}},
                                [*shapes, *[(1,)] * with_loss], plan)
        return unmasked.sums(plan, with_loss)

    def _stages(self, rnd: int, messages: dict[int, Message], extra: dict[str, dict[int, Any]],
                shapes: list[tuple[int, ...]], plan: SecAggPlan) -> secagg.Unmasked:
        """The four SecAgg+ stages over ``messages``, each with the control fields ``extra``
        gives it (field -> client -> value)."""
        control = {"config": self.config_text, "seed": self.seed, "round": rnd}
        fit = {c: records.encode(m, {**control, **{k: v[c] for k, v in extra.items()}})
               for c, m in messages.items()}
        stages = secagg.FlowerSecAgg(rnd, self.seed, {c: self.nodes[c] for c in messages},
                                     plan, lambda contents: self._ask_stage(rnd, contents))
        return stages.run(fit, shapes)

    def _ask_stage(self, rnd: int, contents: dict[int, RecordDict]
                   ) -> tuple[dict[int, RecordDict], dict[int, str]]:
        """One SecAgg+ stage: a fit ("train") message each, the replies' contents, and why
        the others failed (an error, or silence past ``round_timeout``)."""
        out = {c: FlowerMessage(content, self.nodes[c], MESSAGE_TYPES["fit"],
                                group_id=f"seed-{self.seed}-round-{rnd}")
               for c, content in contents.items()}
        replies: dict[int, RecordDict] = {}
        failed = {c: f"no reply within {self.options.round_timeout:g}s (flower.round_timeout)"
                  for c in contents}
        for client, reply in self._exchange_with_nodes(out):
            if reply.has_error():
                failed[client] = f"node error: {reply.error.reason}"
            else:
                replies[client] = reply.content
                del failed[client]
        return replies, failed

    def deliver_evaluate(self, rnd, messages):
        replies, _ = _decoded(rnd, "evaluate", *self._send("evaluate", rnd, messages),
                              records.decode_metrics)
        return replies


def _decoded(rnd: int, phase: str, replies: dict[int, FlowerMessage], failed: dict[int, str],
             decode: Callable[[RecordDict], T]) -> tuple[dict[int, T], dict[int, str]]:
    """Each reply decoded; one that fails decoding is dropped and logged, as a malformed reply
    is at the boundary, and the round goes on with the others."""
    out: dict[int, T] = {}
    for client, reply in replies.items():
        try:
            out[client] = decode(reply.content)
        except MessageError as e:
            log.warning("round %d: dropped %s reply of client %d: undecodable: %s", rnd, phase,
                        client, e)
            failed[client] = f"undecodable reply: {e}"
    return out, failed
