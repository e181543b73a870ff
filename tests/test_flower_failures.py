"""The Flower runtime's failure handling, deterministically: a grid whose nodes are the real
ClientApp handlers in this process, where chosen clients stay silent for chosen fit asks (as a
dead or late node does), so ``flower.min_replies`` / ``flower.retries`` are checked exactly."""

from __future__ import annotations

import math
import uuid
from collections import Counter

import pytest

from graphfed.config import load_config
from graphfed.launch import run as run_experiment
from graphfed.runtime.base import RoundFailed
from tests.conftest import require
from tests.test_flower import assert_same_run, lines

pytest.importorskip("flwr", reason="Flower is not installed (pip install '.[flower]')")

BASE = ["dataset=Cora", "algorithm=fedavg", "partition=louvain", "num_clients=3", "rounds=2",
        "eval_every=1", "device=cpu", "checkpoint_every=0", "engine=sequential", "name=failures"]
FIRST_NODE = 100


class ScriptedGrid:
    """A Flower ``Grid`` in one process. ``silent[c]``: how many messages client ``c`` ignores
    (``math.inf``: all of them); a silent node never replies and computes nothing, as a dead
    one."""

    def __init__(self, num_clients: int, silent: dict[int, float]):
        from flwr.app import Context, RecordDict

        self.silent = silent
        self.contexts = {FIRST_NODE + c: Context(run_id=1, node_id=FIRST_NODE + c,
                                                 node_config={"partition-id": c},
                                                 state=RecordDict(), run_config={})
                         for c in range(num_clients)}
        self.asks: Counter = Counter()  # (client, message type) -> messages pushed
        self.waiting: dict[str, object] = {}
        self.tamper: dict[int, object] = {}  # client -> what it does to its fit replies

    def get_node_ids(self):
        return list(self.contexts)

    def _handle(self, message):
        from graphfed.flower import client_app

        handler = {"query": client_app.identify, "train.setup": client_app.setup,
                   "train": client_app.fit, "evaluate": client_app.evaluate}
        context = self.contexts[message.metadata.dst_node_id]
        reply = handler[message.metadata.message_type](message, context)
        tamper = self.tamper.get(message.metadata.dst_node_id - FIRST_NODE)
        if tamper is not None and message.metadata.message_type == "train":
            tamper(reply.content)
        return reply

    def send_and_receive(self, messages, timeout=None):
        return [self._handle(self._stamp(m)) for m in messages]

    @staticmethod
    def _stamp(message):
        message.metadata.__dict__["_message_id"] = uuid.uuid4().hex  # what the SuperLink does
        return message

    def push_messages(self, messages):
        ids = []
        for message in map(self._stamp, messages):
            client = message.metadata.dst_node_id - FIRST_NODE
            self.asks[client, message.metadata.message_type] += 1
            pushed = sum(n for (c, _), n in self.asks.items() if c == client)
            if pushed > self.silent.get(client, 0):
                self.waiting[message.metadata.message_id] = self._handle(message)
            ids.append(message.metadata.message_id)
        return ids

    def pull_messages(self, message_ids):
        return [self.waiting.pop(i) for i in message_ids if i in self.waiting]


@pytest.fixture
def flower_task(monkeypatch):
    """The identity Flower gives a ServerApp process, so messages can be made here."""
    from flwr.supercore.task_identity import TaskIdentity

    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 1)):
        monkeypatch.setattr(TaskIdentity, name, value)


def scripted_run(tmp_path, silent: dict[int, float], *extra: str, grid=None, owner_keys=None):
    from graphfed.flower.server_app import serve

    config = load_config(None, [*BASE, "flower.round_timeout=0.5", *extra])
    grid = grid or ScriptedGrid(config.num_clients, silent)
    run_dir = tmp_path / "scripted"
    run_dir.mkdir()
    serve(grid, config, run_dir, progress=False, owner_keys=owner_keys)
    return run_dir, grid


@require("Cora")
def test_a_retry_reaches_a_late_client_and_nothing_changes(flower_task, tmp_path):
    run_dir, grid = scripted_run(tmp_path, {2: 1}, "flower.min_replies=3", "flower.retries=1")
    assert grid.asks[2, "train"] == 3  # round 1: ignored, then re-asked; round 2: answered
    reference, _ = run_experiment(load_config(None, BASE), tmp_path / "local", progress=False)
    assert_same_run(reference, run_dir)  # the retried round is the uninterrupted one


@require("Cora")
def test_a_silent_client_is_dropped_when_enough_others_answer(flower_task, tmp_path):
    run_dir, grid = scripted_run(tmp_path, {2: math.inf}, "flower.min_replies=2")
    for line in lines(run_dir):
        assert line["answered"] == [0, 1]
        assert "no reply within 0.5s" in line["dropped"]["2"]
        assert [c["client"] for c in line["clients"]] == [0, 1]
    assert grid.asks[2, "train"] == 2  # once per round: no retries were asked for


@require("Cora")
def test_too_few_replies_after_retries_stop_the_run_with_the_reason(flower_task, tmp_path):
    with pytest.raises(RoundFailed, match=r"round 1: only 2 of 3 clients answered "
                                          r"\(flower.min_replies=3, after 2 retries\); "
                                          r"missing clients \[2\]"):
        scripted_run(tmp_path, {2: math.inf}, "flower.min_replies=3", "flower.retries=2")


@require("Cora")
def test_a_node_holding_another_partition_is_refused(flower_task, tmp_path):
    from graphfed.errors import GraphfedError
    from graphfed.flower.owner import export_partition
    from graphfed.flower.server_app import serve

    other = export_partition(load_config(None, [*BASE, "seed=1"]), 1, tmp_path / "owners")
    config = load_config(None, BASE)
    grid = ScriptedGrid(3, {})
    grid.contexts[FIRST_NODE + 1].node_config = {"data-path": str(other[1])}

    (tmp_path / "run").mkdir()
    with pytest.raises(GraphfedError, match=r"client 1 holds a file of partition \S+, but this "
                                            r"run's partition is"):
        serve(grid, config, tmp_path / "run", progress=False)


@require("Cora")
def test_an_undecodable_reply_is_dropped_and_the_run_completes(flower_task, tmp_path):
    from flwr.app import Array

    from graphfed.runtime import records

    def poison(content):  # a dtype naming a function, as a crafted reply could
        arrays = content.array_records[records.TENSORS]
        name = next(iter(arrays))
        arrays[name] = Array(dtype="load", shape=(1,), stype=records.STYPE, data=b"\0" * 8)

    grid = ScriptedGrid(3, {})
    grid.tamper[2] = poison
    run_dir, _ = scripted_run(tmp_path, {}, grid=grid)
    for line in lines(run_dir):
        assert line["answered"] == [0, 1]
        assert line["dropped"]["2"].startswith("undecodable reply: tensor")
    assert len(lines(run_dir)) == 2  # both rounds ran


def owner_grid(tmp_path, keys_of: dict[int, int]):
    """A scripted grid of real owners: each node holds its exported file and the private key
    of owner ``keys_of[client]`` (its own, unless a test swaps them)."""
    from graphfed.flower.deployment import make_credentials
    from graphfed.flower.owner import export_partition

    creds = make_credentials(tmp_path / "creds", 3)
    files = export_partition(load_config(None, BASE), 0, tmp_path / "owners")
    grid = ScriptedGrid(3, {})
    for c in range(3):
        grid.contexts[FIRST_NODE + c].node_config = {
            "data-path": str(files[c]), "key-path": str(creds.owner_key(keys_of[c]))}
    return grid, creds


@require("Cora")
def test_a_node_proves_its_client_id_with_its_owner_key(flower_task, tmp_path):
    from graphfed.errors import GraphfedError
    from graphfed.runtime.identity import read_owner_keys

    grid, creds = owner_grid(tmp_path, {0: 0, 1: 1, 2: 2})
    keys = read_owner_keys(creds.root, 3)
    run_dir, _ = scripted_run(tmp_path, {}, "rounds=1", grid=grid, owner_keys=keys)
    assert lines(run_dir)[-1]["answered"] == [0, 1, 2]

    grid, creds = owner_grid(tmp_path / "swapped", {0: 0, 1: 2, 2: 2})  # 1 has owner 2's key
    with pytest.raises(GraphfedError, match="claiming client 1 did not prove it holds owner 1"):
        scripted_run(tmp_path / "swapped", {}, grid=grid,
                     owner_keys=read_owner_keys(creds.root, 3))


@require("Cora")
def test_a_node_that_names_no_partition_is_refused(flower_task, tmp_path, monkeypatch):
    from flwr.app import ConfigRecord, RecordDict
    from flwr.app import Message as FlowerMessage

    from graphfed.errors import GraphfedError
    from graphfed.flower import client_app
    from graphfed.runtime import records

    def vague(message, context):  # an old or forged node: a client id and nothing else
        answer = ConfigRecord({"client": int(context.node_config["partition-id"])})
        return FlowerMessage(RecordDict({records.CONTROL: answer}), reply_to=message)

    monkeypatch.setattr(client_app, "identify", vague)
    with pytest.raises(GraphfedError, match="client 0 named no partition"):
        scripted_run(tmp_path, {})
