"""`graphfed reproduce`: preset selection, the table contract, and a tiny real reproduction."""

import csv

import pytest
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.errors import GraphfedError
from graphfed.reproduce import get_preset, reproduce
from graphfed.reproduce.runner import COLUMNS, select
from tests.conftest import require


def test_table2_carries_the_papers_numbers_and_leaves_missing_ones_out():
    preset = get_preset("fgfl-table2")
    assert preset.paper[("fgfl", "PROTEINS", "personalized_acc")] == "0.751±0.017"
    assert preset.paper[("fedavg", "IMDB-BINARY", "gradient_fairness")] == "0.780±0.143"
    assert ("gcfl", "DD", "global_acc") not in preset.paper
    assert ("self-train", "DD", "gradient_fairness") not in preset.paper
    assert len(preset.variants) == 12


def test_the_code_split_table_differs_from_table2_only_in_the_split():
    from graphfed.config import load_config

    table2, code = get_preset("fgfl-table2"), get_preset("fgfl-table2-code-split")
    assert code.paper == table2.paper and code.variants == table2.variants
    config = load_config(None, ["dataset=PROTEINS", "algorithm=fgfl", *code.base])
    assert config.partition.name == "gcfl_code" and config.partition.seed == 123
    assert [o for o in code.base if not o.startswith("partition")] == [
        o for o in table2.base if not o.startswith("partition")]


def test_the_markdown_table_marks_a_shortfall():
    from graphfed.reproduce.runner import gap

    row = {"ours_mean": 0.70, "ours_std": 0.01, "paper": "0.751±0.017"}
    assert gap(row) == "-0.051 (short)"
    assert gap({**row, "ours_mean": 0.74}) == "-0.011"
    assert gap({**row, "paper": ""}) == ""


def test_every_tradeoff_point_runs_its_own_beta_through_a_beta_sensitive_reward():
    from graphfed.reproduce.runner import cell_config

    preset = get_preset("fgfl-tradeoff")
    seen = set()
    for variant in preset.variants[1:]:
        options = cell_config(preset, variant, "PROTEINS", [0], quick=False).algorithm_options()
        assert options.reward_shape == "tanh", variant.method
        seen.add((variant.algorithm, options.beta))
    assert len(seen) == 5 * 4


def test_fairness_reference_joins_a_method_selection():
    variants, datasets = select(get_preset("fgfl-table2"), ["fgfl"], ["proteins"])
    assert [v.method for v in variants] == ["self-train", "fgfl"]
    assert datasets == ["PROTEINS"]


def test_unknown_methods_and_datasets_are_named():
    preset = get_preset("fgfl-table2")
    with pytest.raises(GraphfedError, match="no method"):
        select(preset, ["fgfl", "nope"], None)
    with pytest.raises(GraphfedError, match="covers"):
        select(preset, None, ["Cora"])


def test_cli_rejects_an_unknown_preset():
    result = CliRunner().invoke(app, ["reproduce", "fgfl-nope"])
    assert result.exit_code == 2
    assert "unknown preset" in result.output


@require("PROTEINS")
def test_tiny_payoff_reproduction_writes_the_table_contract(tmp_path, monkeypatch):
    preset = get_preset("fgfl-payoff")
    monkeypatch.setattr(preset, "quick", ["rounds=2", "eval_every=2"])
    out, rows, skipped = reproduce("fgfl-payoff", methods=["fgfl", "equal", "shapley"],
                                   datasets=["PROTEINS"], seeds=1, quick=True,
                                   out=tmp_path / "r", progress=False)
    assert not skipped
    with (out / "table.csv").open() as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == COLUMNS
    assert {(r["method"], r["metric"]) for r in table} == {
        (m, f"payoff_{g}") for m in ("fgfl", "equal", "shapley") for g in preset.groups}
    cells = {(r["method"], r["metric"]): r["ours_mean"] for r in rows}
    assert cells[("equal", "payoff_low")] == pytest.approx(0.1, abs=1e-3)
    group_sizes = {g: len(m) for g, m in preset.groups.items()}
    for method in ("fgfl", "shapley"):  # per-round payoffs spend the budget B = 1
        total = sum(cells[(method, f"payoff_{g}")] * n for g, n in group_sizes.items())
        assert total == pytest.approx(1.0, abs=2e-3)
    assert (out / "payoff.png").stat().st_size > 0 and (out / "table.md").is_file()
    # a second call reuses the finished cell instead of training again
    again, _, _ = reproduce("fgfl-payoff", methods=["fgfl"], datasets=["PROTEINS"], seeds=1,
                            quick=True, out=tmp_path / "r", progress=False)
    assert len(list((again / "runs").iterdir())) == 1


@require("PROTEINS")
def test_fairness_on_the_global_test_set_uses_every_agents_global_accuracy(tmp_path, monkeypatch):
    import json

    preset = get_preset("fgfl-ablation")
    monkeypatch.setattr(preset, "quick", ["rounds=2", "eval_every=2"])
    out, rows, _ = reproduce("fgfl-ablation", methods=["fgfl"], seeds=1, quick=True,
                             out=tmp_path / "g", progress=False, fairness_on="global")
    vectors = json.loads((out / "vectors.json").read_text())["fgfl/PROTEINS"]["0"]
    assert len(vectors["self_train"]) == len(vectors["federated"]) == 10
    assert any(r["metric"] == "gradient_fairness" and r["method"] == "fgfl" for r in rows)
    with pytest.raises(GraphfedError, match="local"):
        reproduce("fgfl-ablation", fairness_on="nowhere")


def test_fedego_presets_carry_the_papers_tables():
    preset = get_preset("fedego-table2-3")
    assert preset.paper[("fedego", "Cora", "local_f1")] == ".9577"
    assert preset.paper[("fedgcn", "CiteSeer", "global_f1")] == ".6614"
    assert ("fedsage+", "CoraFull", "local_f1") not in preset.paper  # OOM in the paper
    assert [v.method for v in preset.variants][-1] == "fedego" and len(preset.variants) == 9
    batch = get_preset("fedego-batch")
    assert batch.paper[("fedego[b=8]", "Cora", "ego_mib")] == "6071"
    assert get_preset("fedego-table4-5").paper[("fedavg", "Cora", "global_f1")] == ".728"


@require("Cora")
def test_tiny_fedego_reproduction_reports_max_and_final_f1_and_upload_mib(tmp_path, monkeypatch):
    preset = get_preset("fedego-batch")
    monkeypatch.setattr(preset, "base", [*preset.base, "model.hidden=16", "local_epochs=1",
                                         "partition.test_num=50"])
    out, rows, skipped = reproduce("fedego-batch", methods=["fedego[b=32]"], datasets=["Cora"],
                                   seeds=1, out=tmp_path / "e", progress=False,
                                   overrides=("rounds=3", "eval_every=1"))
    assert "with rounds=3 eval_every=1" in (out / "table.md").read_text().splitlines()[0]
    assert len((out / "runs" / "fedego[b=32]-Cora" / "seed-0" / "metrics.jsonl")
               .read_text().splitlines()) == 3
    cells = {r["metric"]: r["ours_mean"] for r in rows}
    assert not skipped and set(cells) >= {"local_f1", "global_f1", "local_f1_final",
                                          "global_f1_final", "ego_mib", "param_mib", "minutes"}
    assert cells["local_f1"] >= cells["local_f1_final"] and cells["global_f1"] >= cells[
        "global_f1_final"]
    assert cells["ego_mib"] > 0 and cells["param_mib"] > 0
    assert (out / "f1_curves.png").stat().st_size > 0
    with (out / "table.csv").open() as f:
        assert tuple(next(csv.DictReader(f))) == COLUMNS


def test_a_bad_override_is_refused_before_any_training(tmp_path):
    result = CliRunner().invoke(app, ["reproduce", "fedego-table2-3", "--datasets", "Cora",
                                      "--methods", "fedavg", "--set", "rounds=0",
                                      "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "rounds" in result.output
    assert not list((tmp_path / "x" / "runs").iterdir())
