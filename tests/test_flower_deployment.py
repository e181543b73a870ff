"""A real federation on loopback: a SuperLink and three SuperNodes as separate processes, TLS and
SuperNode authentication on, each owner loading only its own exported partition file; at the
node, graph and edge levels and for graph regression."""

from __future__ import annotations

import json
import math
import threading

import pytest

from graphfed.config import load_config, with_overrides
from graphfed.launch import run as run_experiment
from tests.conftest import require, wait_for
from tests.test_flower import CASES, assert_same_run, assert_wire_bytes_match_protocol, lines

pytest.importorskip("flwr", reason="Flower is not installed (pip install '.[flower]')")

OWNERS = 3
COMMON = [f"num_clients={OWNERS}", "rounds=2", "eval_every=2", "device=cpu", "engine=sequential",
          "checkpoint_every=0", "flower.run_timeout=600"]  # a hung run fails, never hangs CI
NODE_BASE = ["dataset=Cora", "algorithm=fedavg", "partition=louvain", *COMMON, "name=deploy"]
GRAPH_BASE = [*CASES["fgfl-proteins"], *COMMON, "name=deploy-graphs"]


def _federation(tmp_path_factory, base: list[str], dataset: str, port: int):
    from graphfed.data.datasets import is_present
    from graphfed.flower.loopback import LoopbackFederation

    if not is_present(dataset):
        pytest.skip(f"dataset {dataset} not present under GRAPHFED_DATA")
    root = tmp_path_factory.mktemp(f"federation-{dataset}")
    with LoopbackFederation(load_config(None, base), root, port, node_port=port + 10) as fed:
        yield fed


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """Three Cora owners (node level): FedAvg, FedEgo and the failure tests run on them."""
    yield from _federation(tmp_path_factory, NODE_BASE, "Cora", 9393)


@pytest.fixture(scope="module")
def graph_federation(tmp_path_factory):
    """Three PROTEINS owners (graph level), for FGFL's setup exchange and sparse rewards."""
    yield from _federation(tmp_path_factory, GRAPH_BASE, "PROTEINS", 9493)


def assert_deployment_matches_in_process(fed, config, tmp_path) -> None:
    local, _ = run_experiment(config, tmp_path / "local", progress=False)
    remote, _ = fed.run(config, tmp_path / "remote")
    assert_same_run(local, remote)
    assert_wire_bytes_match_protocol(remote)


@require("Cora")
def test_fedego_mashed_ego_graphs_travel_over_tls(federation, tmp_path):
    """FedAvg's plain path and more: a setup exchange, sampled training nodes, the global
    model evaluated by every owner (FedAvg under SecAgg+ is the last test's)."""
    config = load_config(None, [*NODE_BASE, "algorithm=fedego", "model.hidden=32",
                                "sampling.train_fraction=0.2"])
    assert_deployment_matches_in_process(federation, config, tmp_path)


@require("PROTEINS")
def test_fgfl_setup_exchange_and_sparse_rewards_travel_over_tls(graph_federation, tmp_path):
    assert_deployment_matches_in_process(graph_federation, graph_federation.config, tmp_path)


@require("Cora")
def test_a_node_of_another_partition_stops_the_run_before_round_one(federation, tmp_path):
    from graphfed.errors import GraphfedError

    with pytest.raises(GraphfedError, match="holds a file of partition"):
        federation.run(load_config(None, [*NODE_BASE, "seed=1"]), tmp_path)


@require("Cora")
def test_unregistered_supernode_is_refused_and_told_why(federation, tmp_path):
    import subprocess
    import sys

    from graphfed.flower.deployment import make_credentials

    stranger = make_credentials(tmp_path / "stranger", 1)  # a key the operator never registered
    node = ["federation", "node", "--data", str(federation.files[0]), "--superlink",
            federation.address, "--port", "9499"]
    cli = [sys.executable, "-m", "graphfed.cli", *node]
    done = subprocess.run([*cli, "--key", str(stranger.owner_key(0)), "--ca",
                           str(federation.creds.ca)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "did not admit this SuperNode although TLS to it works: its key" in done.stderr
    assert "No SuperNode found with the given public key" in (
        federation.log_path("superlink").read_text())
    # the operator's CA swapped for another: named before Flower starts, nothing else tried
    done = subprocess.run([*cli, "--key", str(federation.creds.owner_key(0)), "--ca",
                           str(stranger.ca)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "does not vouch for" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.fixture(scope="module")
def edge_federation(tmp_path_factory):
    """Three Cora owners holding edge-level clients (link prediction)."""
    base = ["dataset=Cora", "level=edge", "algorithm=fedavg", "partition=louvain",
            "model.hidden=16", *COMMON, "name=deploy-edges"]
    yield from _federation(tmp_path_factory, base, "Cora", 9693)


@pytest.fixture(scope="module")
def esol_federation(tmp_path_factory):
    """Three ESOL owners (scaffold clients, graph regression)."""
    pytest.importorskip("rdkit", reason="rdkit not installed (graphfed[chem])")
    base = ["dataset=ESOL", "algorithm=fedavg", "model=gin", "partition=scaffold", *COMMON,
            "name=deploy-esol"]
    yield from _federation(tmp_path_factory, base, "ESOL", 9593)


def test_link_prediction_over_tls_matches_in_process(edge_federation, tmp_path):
    assert_deployment_matches_in_process(edge_federation, edge_federation.config, tmp_path)


def test_graph_regression_over_tls_matches_in_process(esol_federation, tmp_path):
    assert_deployment_matches_in_process(esol_federation, esol_federation.config, tmp_path)


@require("Cora")
def test_a_node_killed_after_the_key_exchange_leaves_a_secure_round_that_completes(
        federation, tmp_path):
    """Runs last: it ends owner 2's node. FedAvg under SecAgg+ over TLS: round 1, all three
    owners, gives the in-process SecAgg+ numbers and lies within 0.005 test accuracy of the run
    without SecAgg+ (whose end the in-process SecAgg+ run's is within 0.005 of too); owner 2's
    node, killed once round 2's keys are shared (before its masked vector), drops out, and the
    survivors' shares unmask the round."""
    secure = load_config(None, [*NODE_BASE, "eval_every=1", "secure_aggregation.enabled=true"])
    local, _ = run_experiment(secure, tmp_path / "local", progress=False)
    plain, _ = run_experiment(with_overrides(secure, {"secure_aggregation.enabled": False}),
                              tmp_path / "plain", progress=False)
    ends = [json.loads((run / "summary.json").read_text())["final"]["test_acc"]
            for run in (local, plain)]
    assert ends[0] == pytest.approx(ends[1], abs=0.005)

    log = federation.log_path("node2")
    start = len(log.read_text())  # its messages of this run are logged after this
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(out=federation.run(
        with_overrides(secure, {"flower.round_timeout": 45}), tmp_path / "run")))
    worker.start()
    # round 1's four stages, then round 2's key setup and key exchange: the seventh is the
    # masked-vector stage, whose ClientApp must still start, train and mask
    wait_for(lambda: log.read_text()[start:].count("Receiving: train message") >= 7, 300,
             "round 2's masked-vector stage at node 2", poll=0.05)
    federation.kill("node2")
    worker.join(400)
    assert not worker.is_alive() and "out" in result
    remote, summary = result["out"]
    first, second = remote_lines = lines(remote)
    (reference, _), (unmasked, _) = lines(local), lines(plain)
    for key in ("answered", "bytes_up", "bytes_down"):
        assert first[key] == reference[key], key
    for key in ("train_loss", "test_acc", "test_loss"):
        assert first[key] == pytest.approx(reference[key], abs=1e-5), key
    assert first["test_acc"] == pytest.approx(unmasked["test_acc"], abs=0.005)
    assert first["wire_bytes_up"] > first["bytes_up"]  # the keys and shares crossed too
    assert first["answered"] == [0, 1, 2] and second["answered"] == [0, 1]
    assert "masked vectors" in second["dropped"]["2"]
    assert [c["client"] for c in second["clients"]] == [0, 1]
    assert len(remote_lines) == 2 and summary["rounds"] == 2
    assert math.isfinite(second["train_loss"])
    for client in second["clients"]:  # the global model evaluated by the survivors is sound
        assert 0.0 < client["test_acc"] <= 1.0 and math.isfinite(client["test_loss"])
