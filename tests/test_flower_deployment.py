"""A real federation on loopback: a SuperLink and three SuperNodes as separate processes, TLS and
SuperNode authentication on, each owner loading only its own exported partition file."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
import torch

from graphfed.config import load_config
from graphfed.experiment import run_experiment
from tests.conftest import require
from tests.test_flower import assert_same_run, assert_wire_bytes_match_protocol

pytest.importorskip("flwr", reason="Flower is not installed (pip install '.[flower]')")

PORT = 9393
SUPERLINK = f"127.0.0.1:{PORT}"
OWNERS = 3
BASE = ["dataset=Cora", "algorithm=fedavg", "partition=louvain", f"num_clients={OWNERS}",
        "rounds=2", "eval_every=2", "device=cpu", "checkpoint_every=0", "name=deploy"]


def _start(command: list[str], log: Path) -> subprocess.Popen:
    """In its own process group, so the test can end it and every process it spawned."""
    from graphfed.runtime.flower.deployment import tool_env

    return subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            start_new_session=True, env=tool_env())


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)


def _wait_for(predicate, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.5)


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    from graphfed.data.datasets import is_present
    from graphfed.runtime.flower.deployment import (
        CONNECTION,
        flower_home,
        make_credentials,
        superlink_command,
        supernode_command,
        tool,
    )
    from graphfed.runtime.flower.owner import export_partition

    if not is_present("Cora"):
        pytest.skip("dataset Cora not present under GRAPHFED_DATA")
    root = tmp_path_factory.mktemp("federation")
    creds = make_credentials(root / "creds", OWNERS)
    files = export_partition(load_config(None, BASE), 0, root / "owners")
    processes: dict[str, subprocess.Popen] = {}
    try:
        processes["superlink"] = _start(superlink_command(creds, port=PORT), root / "sl.log")
        env = flower_home(root / "flwr-home", SUPERLINK, creds.ca)
        _wait_for(lambda: "Starting Flower SuperExec" in (root / "sl.log").read_text(), 60,
                  "SuperLink did not start")
        registering = [subprocess.Popen([tool("flwr"), "supernode", "register",
                                         str(creds.owner_public_key(i)), CONNECTION], env=env,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                       for i in range(OWNERS)]
        assert all(p.wait(120) == 0 for p in registering)
        for i in range(OWNERS):
            processes[f"node{i}"] = _start(
                supernode_command(SUPERLINK, creds.ca, creds.owner_key(i), files[i], 9400 + i),
                root / f"node{i}.log")
        yield root, creds, processes
    finally:
        for process in processes.values():
            _stop(process)


def deployed(root: Path, creds, *extra: str):
    return load_config(None, [*BASE, "runtime=flower", f"flower.superlink={SUPERLINK}",
                              f"flower.root_certificates={creds.ca}", *extra])


@require("Cora")
def test_deployment_over_tls_matches_in_process(federation, tmp_path):
    root, creds, _ = federation
    local, _ = run_experiment(load_config(None, BASE), tmp_path / "local", progress=False)
    remote, _ = run_experiment(deployed(root, creds), tmp_path / "remote", progress=False)
    assert_same_run(local, remote)
    assert_wire_bytes_match_protocol(remote)


@require("Cora")
def test_unregistered_supernode_is_refused(federation, tmp_path):
    from graphfed.runtime.flower.deployment import make_credentials, supernode_command

    root, creds, _ = federation
    stranger = make_credentials(tmp_path / "stranger", 1)  # a key the operator never registered
    node = _start(supernode_command(SUPERLINK, creds.ca, stranger.owner_key(0),
                                    root / "owners" / "client-0.pt", 9499), tmp_path / "x.log")
    try:
        assert node.wait(90) != 0
    finally:
        _stop(node)
    assert "No SuperNode found with the given public key" in (root / "sl.log").read_text()


@require("Cora")
def test_killed_supernode_is_dropped_and_training_continues(federation, tmp_path):
    root, creds, processes = federation
    config = deployed(root, creds, "flower.round_timeout=45")
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(
        out=run_experiment(config, tmp_path / "run", progress=False)))
    worker.start()
    metrics = tmp_path / "run" / "deploy" / "seed-0" / "metrics.jsonl"
    _wait_for(lambda: metrics.exists() and metrics.read_text().strip(), 240, "no round 1")
    _stop(processes["node2"])
    worker.join(400)
    assert not worker.is_alive() and "out" in result
    _, summary = result["out"]
    first, second = lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert first["answered"] == [0, 1, 2] and second["answered"] == [0, 1]
    assert 2 in second["dropped"] or "2" in second["dropped"]
    assert [c["client"] for c in second["clients"]] == [0, 1]
    assert len(lines) == 2 and summary["rounds"] == 2
    assert all(torch.isfinite(torch.tensor(line["train_loss"])) for line in lines)
    for client in second["clients"]:  # the global model evaluated by the survivors is sound
        assert 0.0 < client["test_acc"] <= 1.0 and math.isfinite(client["test_loss"])
