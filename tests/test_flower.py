"""Flower runtimes: the exact codec, and the same numbers as in-process on Flower's simulation
engine (Ray) for FedAvg (also under SecAgg+, and at the edge level: link prediction), FGFL,
FedEgo (mashed ego-graphs, per-client mixing), a clustered method (GCFL), and the message flows
of later methods: a setup handshake (FedGNN's expansion of overlapping clients), clients of two
model sizes (FedProto), a server that runs the model (FedTAD's distillation) and a schedule of
two phases (AdaFGL)."""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator

import pytest
import torch

from graphfed.algorithms.personalized.adafgl import ADAFGL
from graphfed.config import ConfigError, load_config
from graphfed.launch import run as run_experiment
from graphfed.messages import Message
from tests.conftest import require

flwr = pytest.importorskip("flwr", reason="Flower is not installed (pip install '.[flower]')")

TOL = 1e-5
# a simulated node's first answer waits for its actor to import torch and graphfed: on a loaded
# machine (a test suite on two workers) that can outlast the 120 s default
ON_FLOWER = ("runtime=flower-sim", "flower.connect_timeout=600")
CASES = {
    "fedavg-cora": ["dataset=Cora", "algorithm=fedavg", "partition=louvain"],
    "fedavg-cora-edge": ["dataset=Cora", "algorithm=fedavg", "partition=louvain", "level=edge",
                         "model.hidden=16"],
    "fedavg-cora-median-under-attack": ["dataset=Cora", "algorithm=fedavg", "partition=louvain",
                                        "aggregation.rule=median", "attack.fraction=0.34",
                                        "attack.kind=random"],
    "fgfl-proteins": ["dataset=PROTEINS", "algorithm=fgfl", "model=gin", "batch_size=64",
                      "partition=gcfl_chunk", "partition.chunk=50", "partition.global_test=0.1",
                      "partition.split=[0.8,0.1,0.1]"],
    "fedego-cora": ["dataset=Cora", "algorithm=fedego", "partition=fedego_label",
                    "partition.client_size=0.3", "partition.test_num=100", "model.hidden=32",
                    "client_global_eval=true", "sampling.train_fraction=0.2"],
    "gcfl-proteins": ["dataset=PROTEINS", "algorithm=gcfl", "model=gin", "batch_size=64",
                      "partition=dirichlet", "partition.global_test=0.1"],
    "fedgnn-cora-overlapping": ["dataset=Cora", "algorithm=fedgnn", "partition=major_labels",
                                "partition.overlap=true", "partition.client_size=0.4"],
    "fedproto-cora-two-sizes": ["dataset=Cora", "algorithm=fedproto", "partition=metis",
                                "fedproto.hidden_widths=[16,48]"],
    "fedtad-cora": ["dataset=Cora", "algorithm=fedtad", "partition=metis"],
    "adafgl-cora": ["dataset=Cora", "algorithm=adafgl", "partition=metis",
                    *ADAFGL.small_run],
}


@pytest.fixture(scope="module")
def one_ray() -> Iterator[None]:
    """Every simulated run of this module on one Ray instance: Flower starts Ray unless it is
    up and shuts it down after each run, and a fresh start costs each case seconds. The first
    run starts it with graphfed's own arguments; it is shut down once, after the module."""
    import ray

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ray, "shutdown", lambda *args, **kwargs: None)
        yield
    ray.shutdown()


def config_of(case: str, *extra: str):
    return load_config(None, [*CASES[case], "num_clients=3", "rounds=2", "device=cpu",
                              "checkpoint_every=0", "engine=sequential", f"name={case}", *extra])


def lines(run_dir) -> list[dict]:
    text = (run_dir / "seed-0" / "metrics.jsonl").read_text()
    return [json.loads(x) for x in text.splitlines()]


def assert_same_run(a, b) -> None:
    """Same rounds, answering clients, bytes, losses and every per-client / global metric."""
    la, lb = lines(a), lines(b)
    assert len(la) == len(lb)
    for x, y in zip(la, lb, strict=True):
        for key in ("round", "sampled", "answered", "dropped", "bytes_up", "bytes_down"):
            assert x[key] == y[key], key
        for key in ("train_loss", "test_acc", "test_loss", "global_test_acc", "val_acc"):
            if x.get(key) is not None or y.get(key) is not None:
                assert x[key] == pytest.approx(y[key], abs=TOL), (x["round"], key)
        for cx, cy in zip(x.get("clients", []), y.get("clients", []), strict=True):
            assert cx.keys() == cy.keys()
            for key, value in cx.items():
                assert value == pytest.approx(cy[key], abs=TOL, nan_ok=True), (cx["client"], key)
    sa = json.loads((a / "summary.json").read_text())
    sb = json.loads((b / "summary.json").read_text())
    assert sa.keys() == sb.keys() and sa["final"].keys() == sb["final"].keys()


def assert_wire_bytes_match_protocol(run_dir) -> None:
    fit_rounds = [line for line in lines(run_dir) if line["round"] > 0]
    assert fit_rounds and all(line["bytes_up"] > 0 for line in fit_rounds)
    for line in lines(run_dir):
        assert (line["wire_bytes_up"], line["wire_bytes_down"]) == (
            line["bytes_up"], line["bytes_down"])


def test_codec_keeps_dtypes_shapes_and_counts_payload_bytes():
    from graphfed.runtime import records

    message = Message(
        {"w": torch.randn(3, 4), "idx": torch.tensor([1, 2 ** 40], dtype=torch.int64),
         "i32": torch.tensor([[7, -1]], dtype=torch.int32), "mask": torch.tensor([True, False]),
         "half": torch.randn(5).to(torch.bfloat16), "empty": torch.empty(0, 3),
         "scalar": torch.tensor(2.5, dtype=torch.float64)},
        {"n": 3, "loss": 0.25, "flag": True})
    content = records.encode(message, {"round": 1})
    back = records.decode(content)
    assert back.spec() == message.spec()
    for name, tensor in message.tensors.items():
        assert torch.equal(back.tensors[name], tensor), name
    assert back.scalars == message.scalars
    assert [type(v) for v in back.scalars.values()] == [int, float, bool]
    assert records.wire_nbytes(content) == message.nbytes
    metrics = {"test": {"acc": 0.5, "n": 10}, "global": {"acc": 0.25, "n": 4}}
    assert records.decode_metrics(records.encode_metrics(metrics)) == metrics


def test_flower_runtime_without_flwr_is_a_clean_error(monkeypatch):
    import sys

    from graphfed.errors import GraphfedError
    from graphfed.flower.launch import require_flwr

    monkeypatch.setitem(sys.modules, "flwr", None)
    with pytest.raises(GraphfedError, match="needs Flower"):
        require_flwr()
    with pytest.raises(ConfigError, match="flower"):
        load_config(None, ["flower.client_cpu=1"])


@require("Cora")
@require("PROTEINS")
@pytest.mark.usefixtures("one_ray")
@pytest.mark.parametrize("case", list(CASES))
def test_flower_simulation_matches_in_process(case, tmp_path):
    """Same seed, same per-client and global metrics on Ray-backed Flower as in-process; the
    bytes that crossed Flower equal the protocol's own count."""
    local, _ = run_experiment(config_of(case), tmp_path / "local", progress=False)
    flower, summary = run_experiment(config_of(case, *ON_FLOWER), tmp_path / "flower",
                                     progress=False)
    assert_same_run(local, flower)
    assert_wire_bytes_match_protocol(flower)
    assert summary["rounds"] == 2


@require("ESOL")
@pytest.mark.skipif(importlib.util.find_spec("rdkit") is None,
                    reason="rdkit not installed (graphfed[chem])")
@pytest.mark.usefixtures("one_ray")
def test_flower_simulation_matches_in_process_on_graph_regression(tmp_path):
    """A regression run (FedAvg on ESOL's scaffold clients): the same per-client MAE, RMSE and
    MSE, and the same pooled numbers, on Ray-backed Flower as in-process."""
    base = ["dataset=ESOL", "algorithm=fedavg", "model=gin", "partition=scaffold",
            "num_clients=3", "rounds=2", "device=cpu", "checkpoint_every=0",
            "engine=sequential", "name=fedavg-esol"]
    local, _ = run_experiment(load_config(None, base), tmp_path / "local", progress=False)
    flower, _ = run_experiment(load_config(None, [*base, *ON_FLOWER]), tmp_path / "flower",
                               progress=False)
    assert_same_run(local, flower)
    assert_wire_bytes_match_protocol(flower)
    finals = [json.loads((run / "summary.json").read_text())["final"] for run in (local, flower)]
    for key in ("test_rmse_pooled", "test_mae_pooled", "val_rmse_pooled", "test_rmse"):
        assert finals[0][key] == pytest.approx(finals[1][key], abs=TOL), key
