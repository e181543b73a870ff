"""Graph regression on MoleculeNet's ESOL: MAE/RMSE in the target's units, per-client target
standardisation from training targets only, scaffold clients, quantile-bin Dirichlet skew, runs of
the loss-agnostic algorithms on both engines, and the one-line refusals."""

from __future__ import annotations

import csv
import dataclasses
import importlib.util
import json
import math
import sys

import pytest
import torch
from typer.testing import CliRunner

from graphfed.algorithms.registry import load_all
from graphfed.build import _cached_dataset
from graphfed.cli import app
from graphfed.config import load_config
from graphfed.data.datasets import molecule_smiles
from graphfed.data.federated import GraphClient
from graphfed.data.partition import PARTITIONS, parse_partition
from graphfed.data.partition.plan import TEST, TRAIN, VAL
from graphfed.data.partition.regression import murcko_scaffold, quantile_bins, scaffold_plan
from graphfed.errors import GraphfedError
from graphfed.experiment import build_federation, run_experiment
from graphfed.models.by_level import build_model
from graphfed.models.gnn import ModelOptions
from graphfed.regression import (
    TargetScale,
    many_regression_metrics,
    pooled_rmse,
    regression_metrics,
)
from graphfed.reproduce.catalog import get_preset, load_presets
from graphfed.reproduce.plan import plan_cells, select
from graphfed.reproduce.runner import reproduce
from graphfed.reproduce.selection import evaluated, recorded_by, selected_round
from graphfed.training.batches import PreparedGraphClient
from tests.conftest import error_line, require

pytestmark = [require("ESOL"), pytest.mark.skipif(
    importlib.util.find_spec("rdkit") is None, reason="rdkit not installed (graphfed[chem])")]
ESOL = ["dataset=ESOL", "model=gin", "num_clients=3", "rounds=2", "device=cpu"]


def test_metrics_equal_hand_computed_errors_in_the_targets_units():
    scale = TargetScale(mean=-3.0, std=2.0)
    targets = torch.tensor([-1.0, -3.0, -6.0, 0.0])  # in mol/L
    predictions = torch.tensor([-2.0, -3.0, -4.0, -1.0])
    # errors 1, 0, -2, 1: MAE 4/4 = 1, MSE (1 + 0 + 4 + 1)/4 = 1.5
    m = regression_metrics(scale.standardise(predictions), scale.standardise(targets), scale)
    assert m["mae"] == pytest.approx(1.0) and m["loss"] == pytest.approx(1.5)
    assert m["rmse"] == pytest.approx(math.sqrt(1.5)) and m["n"] == 4
    # two sets in one pass, and their pooled RMSE over all six samples
    a, b = many_regression_metrics([
        (scale.standardise(predictions), scale.standardise(targets), scale),
        (torch.tensor([0.0, 0.0]), torch.tensor([1.0, -1.0]), TargetScale(0.0, 3.0))])
    assert a == m and b["mae"] == pytest.approx(3.0) and b["rmse"] == pytest.approx(3.0)
    assert pooled_rmse([a["rmse"], b["rmse"]], [4, 2]) == pytest.approx(math.sqrt((6 + 18) / 6))


def _client() -> GraphClient:
    config = load_config(None, [*ESOL, "partition=uniform"])
    return build_federation(config, 0).data.clients[0]


def _with_target(client: GraphClient, split: str, value: float) -> GraphClient:
    changed = client.graphs[split][0].clone()
    changed.y = torch.tensor([value])
    graphs = {**client.graphs, split: [changed, *client.graphs[split][1:]]}
    return GraphClient(graphs, client.global_ids)


def test_standardisation_uses_the_clients_training_targets_only():
    client = _client()
    model = build_model("graph", client.graphs["train"][0].num_features, 1,
                        ModelOptions(name="gin"))
    prepared = PreparedGraphClient(client, model, torch.device("cpu"))
    train = client.labels("train")
    assert prepared.target_scale == TargetScale(float(train.double().mean()),
                                                float(train.double().std(unbiased=False)))
    standardised = prepared.splits["train"].y
    assert float(standardised.mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(standardised.std(unbiased=False)) == pytest.approx(1.0, abs=1e-5)
    for split in ("val", "test"):  # another held-out target leaves the scale as it was
        other = PreparedGraphClient(_with_target(client, split, 40.0), model, torch.device("cpu"))
        assert other.target_scale == prepared.target_scale
    moved = PreparedGraphClient(_with_target(client, "train", 40.0), model, torch.device("cpu"))
    assert moved.target_scale != prepared.target_scale


def test_scaffold_clients_share_no_scaffold_and_split_by_scaffold():
    smiles = molecule_smiles("ESOL")
    scaffold = [murcko_scaffold(s) for s in smiles]
    plan = scaffold_plan(smiles, 3, (0.8, 0.1, 0.1))
    held = torch.cat(plan.client_ids)
    assert sorted(held.tolist()) == list(range(len(smiles)))  # every molecule, once
    owners: dict[str, set[int]] = {}
    for k, (ids, codes) in enumerate(zip(plan.client_ids, plan.client_splits, strict=True)):
        for i in ids.tolist():
            owners.setdefault(scaffold[i], set()).add(k)
        by_split = [{scaffold[i] for i in ids[codes == code].tolist()}
                    for code in (TRAIN, VAL, TEST)]
        assert all(by_split)  # each split holds molecules
        assert not (by_split[0] & by_split[1] or by_split[0] & by_split[2]
                    or by_split[1] & by_split[2]), k
        assert int((codes == TRAIN).sum()) >= 0.7 * len(ids)
    assert all(len(clients) == 1 for clients in owners.values())
    sizes = [len(ids) for ids in plan.client_ids]
    assert max(sizes) - min(sizes) <= max(len(v) for v in owners.values())


def test_quantile_bins_and_the_dirichlet_skew_of_a_real_target():
    targets = torch.tensor([0.5, -2.0, 3.0, 1.0, -1.0, 2.0])
    assert quantile_bins(targets, 3).tolist() == [1, 0, 2, 1, 0, 2]
    fed = build_federation(load_config(None, [*ESOL, "partition=dirichlet",
                                              "partition.bins=4", "partition.alpha=0.3"]), 0)
    assert sum(c.num_samples(s) for c in fed.data.clients for s in ("train", "val", "test")) \
        == 1128
    with pytest.raises(GraphfedError, match=r"partition\.bins applies to a regression"):
        build_federation(load_config(None, ["dataset=MUTAG", "partition=dirichlet",
                                            "partition.bins=4", "model=gin"]), 0)
    assert "bins" not in parse_partition("dirichlet").model_dump()  # unset: ids unchanged


@pytest.mark.parametrize("algorithm", ["fedavg", "local"])
def test_two_rounds_on_both_engines_give_the_same_numbers(algorithm, tmp_path):
    summaries = {}
    for engine in ("sequential", "batched"):
        config = load_config(None, [*ESOL, f"algorithm={algorithm}", "partition=scaffold",
                                    f"engine={engine}", "model.dropout=0", f"name={engine}"])
        run_dir = run_experiment(config, tmp_path, progress=False)[0]
        summaries[engine] = json.loads((run_dir / "seed-0" / "summary.json").read_text())
    sequential, batched = (s["final"] for s in summaries.values())
    for key in ("test_mae", "test_rmse", "val_mae", "val_rmse", "test_mae_pooled",
                "test_rmse_pooled", "val_rmse_pooled"):
        assert math.isfinite(sequential[key]) and sequential[key] >= 0, key
        assert sequential[key] == pytest.approx(batched[key], abs=1e-5), key
    assert "test_acc" not in sequential


def test_a_classification_only_algorithm_refuses_regression_in_one_line():
    refusing = sorted(n for n, a in load_all().items()
                      if "graph" in a.levels and "regression" not in a.tasks)
    assert refusing  # prototype and reward methods read classes
    result = CliRunner().invoke(app, ["run", f"algorithm={refusing[0]}", "dataset=ESOL",
                                      "model=gin", "rounds=1", "device=cpu"])
    line = error_line(result)
    assert "is for classification tasks" in line and "regression task" in line, line
    assert "fedavg" in line  # names those that can


def test_missing_rdkit_is_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "rdkit", None)
    monkeypatch.setitem(sys.modules, "rdkit.Chem", None)
    _cached_dataset.cache_clear()  # an earlier test's ESOL, loaded with rdkit, is not reused
    result = CliRunner().invoke(app, ["run", "dataset=ESOL", "model=gin", "rounds=1",
                                      "device=cpu"])
    assert "pip install 'graphfed[chem]'" in error_line(result)


GRAPH_PARTITIONS = sorted(name for name, kind in PARTITIONS.items() if "graph" in kind.levels)


@pytest.mark.parametrize("name", GRAPH_PARTITIONS)
def test_a_graph_partition_splits_a_real_target_or_refuses_it_in_one_line(name):
    """A kind that declares regression splits ESOL (every client trains; a global test set,
    which no client's training targets standardise, is refused); one that deals, stratifies or
    skews by class labels refuses it, naming the kinds that can."""
    kind = PARTITIONS[name]
    run = ["run", *ESOL, f"partition={name}", "num_clients=4"]
    if "regression" in kind.tasks and kind.own_global_test:
        assert "standardises its targets" in error_line(CliRunner().invoke(app, run))
        return
    if "regression" in kind.tasks:
        fed = build_federation(load_config(None, [*ESOL, f"partition={name}",
                                                  "num_clients=4"]), 0)
        assert all(client.num_samples("train") > 0 for client in fed.data.clients)
        return
    line = error_line(CliRunner().invoke(app, run))
    assert f"partition '{name}' deals by class labels" in line and "regression task" in line
    assert "scaffold" in line and "dirichlet" in line and name not in line.split(":")[-1]


def test_some_graph_partition_reads_class_labels():
    assert [n for n in GRAPH_PARTITIONS if "regression" not in PARTITIONS[n].tasks]


def test_the_regression_preset_runs_every_method_that_declares_regression():
    preset = get_preset("regression-standard")
    able = {n for n, a in load_all().items() if "graph" in a.levels and "regression" in a.tasks}
    methods = [v.method for v in preset.variants]
    assert set(methods) == able | {"centralised"} and methods[1:4] == ["fedavg", "fedprox",
                                                                       "local"]
    assert not preset.paper  # graphfed's own table
    variants, labels = select(preset, ["centralised", "fedavg"], None, ["K=8"])
    cells = plan_cells(preset, variants, labels, [0], [None], False, "local", ())
    clients = {(c.variant.method, c.dataset): c.config.num_clients for c in cells}
    assert set(clients.values()) == {1, 8}
    assert all((n == 1) == (m == "centralised") for (m, _), n in clients.items())


def test_a_tiny_regression_reproduction_reports_rmse_at_the_best_validation_round(tmp_path):
    """The preset's table, its centralised and FedAvg rows, each seed's numbers from the round
    of lowest pooled validation RMSE, the round min_val_loss picks too."""
    out, rows, skipped = reproduce("regression-standard", methods=["centralised", "fedavg"],
                                   settings=["K=4", "partition=scaffold"], seeds=1, quick=True,
                                   overrides=("rounds=3",), out=tmp_path / "r", progress=False)
    assert not skipped
    assert {(r["method"], r["dataset"], r["metric"]) for r in rows} == {
        (m, "ESOL/scaffold/K=4", k) for m in ("centralised", "fedavg")
        for k in ("pooled_rmse", "pooled_mae")}
    with (out / "table.csv").open() as f:
        assert all(r["paper"] == "" and r["select"] == "min_val_rmse" for r in csv.DictReader(f))
    run = out / "runs" / "fedavg-ESOL_partition=scaffold_K=4"
    rounds = evaluated([json.loads(x) for x in
                        (run / "seed-0" / "metrics.jsonl").read_text().splitlines()])
    best = selected_round("min_val_rmse", rounds, "test_rmse_pooled")
    assert best == selected_round("min_val_loss", rounds, "test_rmse_pooled")
    assert best["val_rmse_pooled"] == min(r["val_rmse_pooled"] for r in rounds)
    fedavg = next(r for r in rows if r["method"] == "fedavg" and r["metric"] == "pooled_rmse")
    assert fedavg["ours_mean"] == pytest.approx(best["test_rmse_pooled"])


@pytest.mark.parametrize("rule", ["max_val_acc", "max_val_roc_auc"])
def test_a_classification_rule_asked_of_a_regression_table_is_refused_before_training(
        rule, tmp_path):
    result = CliRunner().invoke(app, ["reproduce", "regression-standard", "--select", rule,
                                      "--out", str(tmp_path / "x")])
    line = error_line(result)
    assert f"select {rule}" in line and "regression run (ESOL)" in line
    assert not (tmp_path / "x" / "runs").exists()


def test_a_classification_metric_in_a_regression_preset_is_refused_before_training(
        tmp_path, monkeypatch):
    base = get_preset("regression-standard")
    accuracy = dataclasses.replace(base, name="esol-accuracy", metrics=("local_acc",),
                                   select="min_val_loss")
    monkeypatch.setitem(load_presets(), accuracy.name, accuracy)
    with pytest.raises(GraphfedError, match=r"reads test_acc, which a regression run \(ESOL\)"):
        reproduce(accuracy.name, out=tmp_path / "x", progress=False)
    assert not (tmp_path / "x" / "runs").exists()
    assert recorded_by("val_loss_pooled") == ("classification", "regression")
    assert recorded_by("test_rmse_pooled") == ("regression",)
    assert recorded_by("global_test_acc") == ("classification",)
