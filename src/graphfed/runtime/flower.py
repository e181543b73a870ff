"""The Flower transport: a ``Runtime`` whose messages travel through a Flower ``Grid``.

The round logic (sampling, boundary checks, aggregation, byte counts) is the shared one of
``runtime/base.py``; this module only turns graphfed messages into Flower messages for the right
node and back. A node that errs, dies or misses ``flower.round_timeout`` is dropped for the round;
fewer than ``flower.min_replies`` fit replies re-asks the missing clients ``flower.retries`` times,
then stops the run with a clear message. The ServerApp that hosts it is ``graphfed.flower``.
"""

from __future__ import annotations

import logging
import time

from flwr.app import Message as FlowerMessage
from flwr.app import RecordDict
from flwr.serverapp import Grid

from graphfed.errors import GraphfedError
from graphfed.protocol import Message, Server
from graphfed.runtime import records
from graphfed.runtime.base import RoundFailed, Runtime
from graphfed.runtime.flower_options import FlowerOptions

log = logging.getLogger("graphfed.runtime.flower")
MESSAGE_TYPES = {"setup": "train.setup", "fit": "train", "evaluate": "evaluate"}


def discover_clients(grid: Grid, num_clients: int, wait: float, partition_id: str
                     ) -> dict[int, int]:
    """Graphfed client id -> Flower node id, once every client's node has connected. A node
    whose data file comes from another partition than the run's is refused: its numbers would
    be silently wrong."""
    deadline = time.monotonic() + wait
    while len(nodes := list(grid.get_node_ids())) < num_clients:
        if time.monotonic() > deadline:
            raise GraphfedError(f"only {len(nodes)} of {num_clients} SuperNodes connected "
                                f"within {wait:.0f}s")
        time.sleep(0.5)
    asks = [FlowerMessage(RecordDict(), node, "query", group_id="discover") for node in nodes]
    mapping: dict[int, int] = {}
    for reply in grid.send_and_receive(asks, timeout=wait):
        if reply.has_error():
            raise GraphfedError(f"node {reply.metadata.src_node_id} could not say which client "
                                f"it is: {reply.error.reason}")
        answer = reply.content.config_records[records.CONTROL]
        client = int(answer["client"])
        held = str(answer.get("partition", partition_id))
        if held != partition_id:
            raise GraphfedError(
                f"the SuperNode of client {client} holds a file of partition {held}, but this "
                f"run's partition is {partition_id}: export the owners' files for this config "
                f"and seed (graphfed federation export) and restart the nodes on them")
        if client in mapping:
            raise GraphfedError(f"two SuperNodes both hold client {client}'s data")
        mapping[client] = reply.metadata.src_node_id
    missing = sorted(set(range(num_clients)) - set(mapping))
    if missing:
        raise GraphfedError(f"no connected SuperNode holds clients {missing}")
    return mapping


class FlowerRuntime(Runtime):
    """Delivers each client's own message to its node through ``grid``."""

    def __init__(self, server: Server, grid: Grid, options: FlowerOptions, num_clients: int,
                 client_fraction: float, seed: int, config_text: str, partition_id: str):
        super().__init__(server, num_clients, client_fraction, seed)
        self.grid = grid
        self.options = options
        self.config_text = config_text  # each node builds its client from the run's config
        self.nodes = discover_clients(grid, num_clients, options.connect_timeout, partition_id)
        self._wire = (0, 0)

    def wire_bytes(self) -> tuple[int, int]:
        return self._wire

    def _exchange_with_nodes(self, out: dict[int, FlowerMessage]
                             ) -> list[tuple[int, FlowerMessage]]:
        """Push, then pull replies until all came or ``round_timeout`` passed. Replies are
        matched by the message they answer: the SuperLink itself answers for a node it lost."""
        ids = list(self.grid.push_messages(list(out.values())))
        asked = dict(zip(ids, out, strict=True))
        timeout = self.options.round_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        got: list[tuple[int, FlowerMessage]] = []
        while asked and (deadline is None or time.monotonic() < deadline):
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
                failed.setdefault(client, f"no reply within {self.options.round_timeout}s")
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
        replies, failed = self._send("setup", 0, messages)
        return {c: records.decode(r.content) for c, r in replies.items()}, failed

    def deliver_fit(self, rnd, messages):
        replies, failed = self._send("fit", rnd, messages)
        return {c: records.decode(r.content) for c, r in replies.items()}, failed

    def deliver_evaluate(self, rnd, messages):
        replies, _ = self._send("evaluate", rnd, messages)
        return {c: records.decode_metrics(r.content) for c, r in replies.items()}
