"""Faults on a real federation (issue 53): a hung ClientApp, a crashed owner restarted at once, a
SuperLink restart, a run graphfed gives up on, and the loopback sent SIGTERM. Each runs on a
loopback federation (TLS, authenticated SuperNodes) on ports picked free at run time."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from graphfed.config import load_config, with_overrides
from graphfed.errors import GraphfedError
from graphfed.flower.processes import descendants
from tests.conftest import require, wait_for

pytest.importorskip("flwr", reason="Flower is not installed (pip install '.[flower]')")

OWNERS = 3
BASE = ["dataset=Cora", "algorithm=fedavg", "partition=louvain", f"num_clients={OWNERS}",
        "rounds=2", "eval_every=2", "device=cpu", "checkpoint_every=0", "name=faults",
        "flower.connect_timeout=60", "flower.run_timeout=240"]  # a hung run fails, never hangs


def free_ports(count: int) -> int:
    """The first of ``count`` consecutive ports nothing listens on now."""
    for _ in range(50):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            first = probe.getsockname()[1]
        if first + count < 65000 and all(port_free(first + i) for i in range(count)):
            return first
    raise RuntimeError("no free ports")


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def listening(port: int) -> bool:
    """Whether any socket on this machine listens on ``port`` (/proc/net/tcp and tcp6, state
    0A): what "holding the port" means, unlike a test bind, which a closed server's connections
    left in TIME_WAIT, or another process's outgoing connection, can also refuse."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                local, state = row.split()[1], row.split()[3]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    return True
    return False


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    from graphfed.data.datasets import is_present
    from graphfed.flower.loopback import LoopbackFederation

    if not is_present("Cora"):
        pytest.skip("dataset Cora not present under GRAPHFED_DATA")
    port = free_ports(1 + OWNERS)
    root = tmp_path_factory.mktemp("faults")
    with LoopbackFederation(load_config(None, BASE), root, port, node_port=port + 1) as fed:
        yield fed


def test_round_timeout_is_finite_by_default_and_documented():
    from graphfed.runtime.flower_options import DEFAULT_ROUND_TIMEOUT, FlowerOptions

    timeout = load_config(None, []).flower.round_timeout
    assert timeout == DEFAULT_ROUND_TIMEOUT and math.isfinite(timeout)
    description = FlowerOptions.model_fields["round_timeout"].description
    assert "hangs" in description and "dropped" in description
    docs = (Path(__file__).parents[1] / "docs" / "flower.md").read_text()
    assert f"always finite (default {DEFAULT_ROUND_TIMEOUT:.0f} s" in " ".join(docs.split())
    with pytest.raises(GraphfedError):  # "wait forever" is no longer a value
        load_config(None, ["flower.round_timeout=null"])


def clientapps(node: subprocess.Popen) -> list[int]:
    """The ClientApp processes a SuperNode runs now (one per message it is answering)."""
    found = []
    for pid in descendants(node.pid):
        with contextlib.suppress(OSError):
            if b"flwr-clientapp" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
    return found


@require("Cora")
def test_a_hung_owner_is_dropped_and_the_run_goes_on(federation, tmp_path):
    """Owner 2 hangs once it has taken its fit message (its SuperNode stopped for 50 s, past
    the round's 40 s timeout, so its reply cannot come in time): the round drops it, by
    graphfed's round_timeout or, should its last heartbeat be old enough, by the SuperLink
    answering for a node it lost, and the run ends; owner 2, resumed, answers the evaluation."""
    config = with_overrides(federation.config, {"rounds": 1, "eval_every": 1,
                                                "flower.round_timeout": 40})
    node2 = federation.processes["node2"]
    log = federation.log_path("node2")
    start = len(log.read_text())  # before the run: its fit message is logged after this
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(out=federation.run(config, tmp_path)))
    worker.start()
    wait_for(lambda: "Receiving: train message" in log.read_text()[start:], 120,
             "no fit sent to node 2", poll=0.05)
    os.kill(node2.pid, signal.SIGSTOP)  # it can send nothing, not even its ClientApp's reply
    try:
        time.sleep(50)
    finally:
        os.kill(node2.pid, signal.SIGCONT)
    worker.join(150)
    assert "out" in result, "the run did not finish"
    run_dir, summary = result["out"]
    metrics = (run_dir / "seed-0" / "metrics.jsonl").read_text()
    (line,) = [json.loads(x) for x in metrics.splitlines()]
    assert summary["rounds"] == 1 and line["answered"] == [0, 1]
    assert "2" in line["dropped"]
    assert json.loads((run_dir / "flower-run.json").read_text())["state"] == "finished"


def with_suppressed(call) -> None:
    with contextlib.suppress(ProcessLookupError):
        call()


@require("Cora")
def test_run_timeout_stops_the_flower_run_and_the_run_directory_says_so(federation, tmp_path):
    """graphfed gives up after run_timeout: the Flower run is stopped too, so nothing writes a
    summary afterwards, and flower-run.json and `flwr ls` tell the same story."""
    from graphfed.flower.deployment import CONNECTION, tool

    config = with_overrides(federation.config, {"rounds": 40, "eval_every": 40,
                                                "flower.run_timeout": 25})
    with pytest.raises(GraphfedError, match="run_timeout=25s; graphfed stopped Flower run"):
        federation.run(config, tmp_path)
    (run_dir,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    state = json.loads((run_dir / "flower-run.json").read_text())
    assert state["state"] == "stopped" and state["flower_run_id"] > 0
    env = {**os.environ, "FLWR_HOME": str(run_dir / "flwr-home")}
    listed = subprocess.run([tool("flwr"), "ls", "--run-id", str(state["flower_run_id"]),
                             "--format", "json", CONNECTION], env=env, capture_output=True,
                            text=True, timeout=60)
    assert "finished:stopped" in listed.stdout, listed.stdout + listed.stderr
    time.sleep(10)  # what a run left going would write meanwhile
    assert not (run_dir / "summary.json").exists()


@require("Cora")
def test_superlink_restart_keeps_registrations_and_the_nodes_rejoin(federation, tmp_path):
    nodes = [federation.processes[f"node{i}"] for i in range(OWNERS)]
    federation.restart_superlink()
    config = with_overrides(federation.config, {"rounds": 1, "eval_every": 1})
    _, summary = federation.run(config, tmp_path)  # no node registered or started again
    assert summary["rounds"] == 1
    assert all(node.poll() is None for node in nodes)  # the same SuperNode processes
    assert federation.database.is_file()


@require("Cora")
def test_an_owner_restarted_at_once_after_a_crash_rejoins(federation, tmp_path):
    """Runs after the others: owner 1's node is replaced by `graphfed federation node`."""
    federation.kill("node1")  # signs off: the owner's own command then joins at once
    port = free_ports(2)
    node = [sys.executable, "-m", "graphfed.cli", "federation", "node", "--data",
            str(federation.files[1]), "--key", str(federation.creds.owner_key(1)), "--ca",
            str(federation.creds.ca), "--superlink", federation.address]

    def start(port: int, name: str) -> tuple[subprocess.Popen, Path]:
        out = tmp_path / f"{name}.log"
        with out.open("w") as sink:
            return subprocess.Popen([*node, "--port", str(port)], stdout=sink,
                                    stderr=subprocess.STDOUT, start_new_session=True), out

    first, first_log = start(port, "first")
    try:
        wait_for(lambda: "SuperNode ID:" in first_log.read_text(), 60, "owner 1 did not join")
    finally:  # a crash: the wrapper and its node die at once, nobody signs off
        for pgid in {first.pid, *descendants(first.pid)}:
            with_suppressed(lambda g=pgid: os.killpg(g, signal.SIGKILL))
        first.wait()
    second, second_log = start(port + 1, "second")
    try:
        wait_for(lambda: "SuperNode ID:" in second_log.read_text() or second.poll() is not None,
                 85, "the restarted owner neither joined nor gave up")
        text = second_log.read_text()
        assert second.poll() is None and "is not registered" not in text, text[-2000:]
        assert "stopped without signing off" in text
    finally:
        second.send_signal(signal.SIGTERM)  # the node signs off and ends its helpers
        second.wait(40)
    assert not any(alive(pid) for pid in descendants(second.pid))


def test_sigterm_to_the_loopback_ends_every_process_it_started(tmp_path):
    from graphfed.data.datasets import is_present

    if not is_present("Cora"):
        pytest.skip("dataset Cora not present under GRAPHFED_DATA")
    port = free_ports(1 + OWNERS)
    command = [sys.executable, "-m", "graphfed.cli", "federation", "loopback", *BASE,
               "--root", str(tmp_path / "fed"), "--port", str(port), "--node-port",
               str(port + 1), "--out", str(tmp_path / "runs")]
    out = tmp_path / "loopback.log"
    with out.open("w") as sink:
        loopback = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # a group apart from pytest's
    started: dict[int, int] = {}
    try:
        wait_for(lambda: "run: submitted" in out.read_text(), 120, "the loopback did not start")
        started = descendants(loopback.pid)
        assert len(started) > OWNERS + 1  # the SuperLink, the nodes and what they spawned
        loopback.send_signal(signal.SIGTERM)
        loopback.wait(60)
        left = [pid for pid in started if alive(pid)]
        assert not left, f"still running after the loopback exited: {left}"
        assert not any(listening(port + i) for i in range(1 + OWNERS))
        assert loopback.returncode != 0
    finally:
        if loopback.poll() is None:
            loopback.kill()
        for pid in started:  # what a failing loopback left behind
            with_suppressed(lambda p=pid: os.kill(p, signal.SIGKILL))
