"""`graphfed reproduce`: preset selection, the table contract, and a tiny real reproduction."""

import csv
import json
from concurrent.futures import Future
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.cli.common import split_ids
from graphfed.errors import GraphfedError
from graphfed.reproduce import get_preset, reproduce
from graphfed.reproduce.plan import select
from graphfed.reproduce.write import COLUMNS
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


def test_the_markdown_table_marks_a_gap_beyond_the_tolerance_either_way():
    from graphfed.reproduce.write import gap

    row = {"ours_mean": 0.70, "ours_std": 0.01, "paper": "0.751±0.017"}
    assert gap(row) == "-0.051 (short)"
    assert gap({**row, "ours_mean": 0.74}) == "-0.011"
    assert gap({**row, "ours_mean": 0.80}) == "+0.049 (above)"
    assert gap({**row, "paper": ""}) == ""


def test_every_tradeoff_point_runs_its_own_beta_through_a_beta_sensitive_reward():
    from graphfed.reproduce.plan import cell_config

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


def test_method_ids_split_at_commas_outside_brackets():
    assert split_ids("fairgfl[eps_v=1,eps_e=0.5], fedavg,,gcfl+") == [
        "fairgfl[eps_v=1,eps_e=0.5]", "fedavg", "gcfl+"]
    assert split_ids("") is None
    variants, _ = select(get_preset("fairgfl-privacy"),
                         split_ids("fairgfl[eps_v=8,eps_e=1],fairgfl[eps_v=1,eps_e=4]"), None)
    assert [v.method for v in variants] == ["fairgfl[eps_v=8,eps_e=1]", "fairgfl[eps_v=1,eps_e=4]"]


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
    made = json.loads((out / "provenance.json").read_text())  # the code behind the table
    assert made["engine"] == ["sequential"] and made["torch"] == torch.__version__
    assert made["commit"] is None or len(made["commit"]) == 40
    # a second call reuses the finished cell instead of training again
    again, _, _ = reproduce("fgfl-payoff", methods=["fgfl"], datasets=["PROTEINS"], seeds=1,
                            quick=True, out=tmp_path / "r", progress=False)
    assert len(list((again / "runs").iterdir())) == 1


@require("PROTEINS")
def test_more_seeds_train_only_the_new_ones_and_fewer_retrain_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(get_preset("fgfl-payoff"), "quick", ["rounds=2", "eval_every=2"])

    def cell(seeds: int) -> Path:
        out, _, _ = reproduce("fgfl-payoff", methods=["fgfl"], datasets=["PROTEINS"],
                              seeds=seeds, quick=True, out=tmp_path / "r", progress=False)
        (run,) = (out / "runs").iterdir()
        return run

    first = cell(1) / "seed-0" / "metrics.jsonl"
    stamp = first.stat().st_mtime_ns
    run = cell(2)
    assert first.stat().st_mtime_ns == stamp  # seed 0 kept, seed 1 trained beside it
    assert json.loads((run / "summary.json").read_text())["seeds"] == [0, 1]
    assert (run / "seed-1" / "summary.json").is_file()
    run = cell(1)
    assert first.stat().st_mtime_ns == stamp
    assert json.loads((run / "summary.json").read_text())["seeds"] == [0]


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
def test_tiny_fedego_reproduction_reports_each_selector_and_upload_mib(tmp_path, monkeypatch):
    import json

    preset = get_preset("fedego-batch")
    monkeypatch.setattr(preset, "base", [*preset.base, "model.hidden=16", "local_epochs=1",
                                         "partition.test_num=50"])

    def run(select=None):
        return reproduce("fedego-batch", methods=["fedego[b=32]"], datasets=["Cora"], seeds=1,
                         out=tmp_path / "e", progress=False, selector=select,
                         overrides=("rounds=3", "eval_every=1"))

    out, rows, skipped = run()
    title = (out / "table.md").read_text().splitlines()[0]
    assert "with rounds=3 eval_every=1" in title and "select max" in title
    assert "test-selected" in title  # FedEgo's own reporting, labelled as what it is
    metrics = out / "runs" / "fedego[b=32]-Cora" / "seed-0" / "metrics.jsonl"
    lines = [json.loads(x) for x in metrics.read_text().splitlines()]
    assert len(lines) == 3
    best = {r["metric"]: r["ours_mean"] for r in rows}
    assert not skipped and set(best) >= {"local_f1", "global_f1", "ego_mib", "param_mib",
                                         "minutes"}
    assert best["local_f1"] == max(line["test_acc"] for line in lines)
    assert best["ego_mib"] > 0 and best["param_mib"] > 0
    assert (out / "f1_curves.png").stat().st_size > 0
    with (out / "table.csv").open() as f:
        table = list(csv.DictReader(f))
    assert tuple(table[0]) == COLUMNS
    assert {r["metric"]: r["select"] for r in table}["local_f1"] == "max"
    assert {r["metric"]: r["select"] for r in table}["ego_mib"] == "run"

    # the finished cell is reported under another rule without training again
    _, rows, _ = run("final")
    assert metrics.read_text().count("\n") == 3
    final = {r["metric"]: r["ours_mean"] for r in rows}
    assert final["local_f1"] == lines[-1]["test_acc"] <= best["local_f1"]
    assert "select final" in (out / "table.md").read_text().splitlines()[0]
    _, rows, _ = run("min_val_loss")
    chosen = min(lines, key=lambda line: line["val_loss_pooled"])
    honest = {r["metric"]: r["ours_mean"] for r in rows}
    assert (honest["local_f1"], honest["global_f1"]) == (
        chosen["test_acc"], chosen["client_global_test_acc"])


def _round(rnd: int, **values) -> dict:
    return {"round": rnd, "clients": [{"client": 0, "test_acc": values.get("test_acc", 0.0)}],
            **values}


def test_each_selector_picks_its_round_among_the_evaluated_ones():
    from graphfed.reproduce.selection import evaluated, selected_round

    lines = [{"round": 0}, {"round": 1}]  # a setup line and an unevaluated round
    lines.append(_round(2, test_acc=0.9, global_test_acc=0.1, val_loss_pooled=0.8))
    for rnd in range(3, 14):  # eleven more evaluated rounds: round 2 falls out of the last 10
        lines.append(_round(rnd, test_acc=0.5 + rnd / 100, global_test_acc=0.2,
                            val_loss_pooled=1.0))
        lines.append({"round": rnd * 100})  # rounds between evaluations are not candidates
    lines[lines.index(next(x for x in lines if x["round"] == 5))] = _round(
        5, test_acc=0.51, global_test_acc=0.7, val_loss_pooled=0.3)
    lines[lines.index(next(x for x in lines if x["round"] == 9))] = _round(
        9, test_acc=0.52, global_test_acc=0.4, val_loss_pooled=0.3)  # a tie: the earlier wins
    rounds = evaluated(lines)
    assert len(rounds) == 12

    def picked(rule, key="test_acc"):
        return selected_round(rule, rounds, key)["round"]

    assert picked("final") == picked("final", "global_test_acc") == 13
    assert picked("max") == 2 and picked("max", "global_test_acc") == 5
    assert picked("best_last_10") == 13 and picked("best_last_10", "global_test_acc") == 5
    # the honest rule: one round, whichever metric is asked for
    assert picked("min_val_loss") == picked("min_val_loss", "global_test_acc") == 5
    with pytest.raises(GraphfedError, match="validation"):
        selected_round("min_val_loss", [_round(1, test_acc=0.5)], "test_acc")


def test_max_val_acc_reports_every_metric_from_the_round_of_best_client_mean_validation_accuracy():
    from graphfed.reproduce.selection import TEST_SELECTED, selected_round

    rounds = [_round(1, test_acc=0.9, val_acc=0.5), _round(2, test_acc=0.6, val_acc=0.8),
              _round(3, test_acc=0.7, val_acc=0.8), _round(4, test_acc=0.8, val_acc=0.7)]
    assert selected_round("max_val_acc", rounds, "test_acc")["round"] == 2  # a tie: the earlier
    assert selected_round("max_val_acc", rounds, "global_test_acc")["round"] == 2
    assert "max_val_acc" not in TEST_SELECTED
    with pytest.raises(GraphfedError, match="val_acc"):
        selected_round("max_val_acc", [_round(1, test_acc=0.5)], "test_acc")


def test_an_unknown_selector_is_refused_before_any_training(tmp_path):
    result = CliRunner().invoke(app, ["reproduce", "fgfl-ablation", "--select", "best",
                                      "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "min_val_loss" in result.output
    assert not (tmp_path / "x").exists()


def test_every_paper_table_loads_with_the_table_schema():
    from importlib.resources import files

    from graphfed.reproduce.catalog import load_presets
    from graphfed.reproduce.preset import PAPER_COLUMNS, paper_numbers

    root = files("graphfed.reproduce") / "tables"
    names = {(paper.name, t.name.removesuffix(".csv")) for paper in root.iterdir()
             for t in paper.iterdir()}
    assert len(names) == 17  # every published table the presets print beside their own
    for paper, table in names:
        with (root / paper / f"{table}.csv").open(encoding="utf-8") as f:
            assert tuple(next(csv.reader(f))) == PAPER_COLUMNS
        assert all(paper_numbers(paper, table).values())
    assert paper_numbers("fgfl", "table4")[("fgfl-no-reward", "PROTEINS",
                                            "gradient_fairness")] == "0.710±0.146"
    assert paper_numbers("fedego", "table13")[("fedego-server", "Cora", "local_f1")] == ".9535"
    assert paper_numbers("fedego", "table9")[("fedavg", "CiteSeer", "param_mib")] == "11250"
    for preset in load_presets().values():  # every number belongs to a row the preset can produce
        methods = {v.method for v in preset.variants}
        for method, dataset, metric in preset.paper:
            assert method in methods and dataset in preset.datasets, (preset.name, method)
            assert metric in preset.metrics, (preset.name, metric)


def test_every_preset_metric_is_registered_with_one_meaning():
    from graphfed.reproduce.catalog import load_presets
    from graphfed.reproduce.score import RoundValue, metric_kind, register_metrics

    for preset in load_presets().values():
        for metric in preset.metrics:
            metric_kind(metric)  # a paper module registered it
    # two papers may register one name with the same meaning, never with another
    assert register_metrics({"global_acc": RoundValue("global_test_acc")}) == ("global_acc",)
    with pytest.raises(GraphfedError, match="global_acc registered as"):
        register_metrics({"global_acc": RoundValue("test_acc")})
    with pytest.raises(GraphfedError, match="registers the metric nope"):
        metric_kind("nope")


def test_a_bad_override_is_refused_before_any_training(tmp_path):
    result = CliRunner().invoke(app, ["reproduce", "fedego-table2-3", "--datasets", "Cora",
                                      "--methods", "fedavg", "--set", "rounds=0",
                                      "--out", str(tmp_path / "x")])
    assert result.exit_code == 2 and "rounds" in result.output
    assert not (tmp_path / "x").exists()


@require("PROTEINS")
def test_seeds_trained_in_worker_processes_give_the_same_table(tmp_path):
    def table(jobs: int, out: str) -> list[dict]:
        _, rows, _ = reproduce("fgfl-ablation", methods=["self-train", "fgfl-no-reward"],
                               seeds=2, out=tmp_path / out, progress=False, jobs=jobs,
                               overrides=("rounds=2", "eval_every=2"))
        return rows

    together = table(2, "two")
    assert together == table(1, "one")
    runs = tmp_path / "two" / "runs"
    # every seed moved into its cell; the workers' staging folder is left empty
    assert sorted(p.name for p in runs.iterdir() if p.name != ".seeds") == [
        "fgfl-no-reward-PROTEINS", "self-train-PROTEINS"]
    assert list((runs / ".seeds").iterdir()) == []
    for cell in ("fgfl-no-reward-PROTEINS", "self-train-PROTEINS"):
        assert json.loads((runs / cell / "summary.json").read_text())["seeds"] == [0, 1]
    with pytest.raises(GraphfedError, match="jobs"):
        reproduce("fgfl-ablation", jobs=0)


@require("PROTEINS")
def test_a_third_seed_with_workers_trains_only_that_seed(tmp_path):
    kwargs = dict(methods=["self-train"], out=tmp_path, progress=False, jobs=2,
                  overrides=("rounds=2", "eval_every=2"))
    reproduce("fgfl-ablation", seeds=2, **kwargs)
    cell = tmp_path / "runs" / "self-train-PROTEINS"
    before = {s: (cell / f"seed-{s}" / "summary.json").stat().st_mtime_ns for s in (0, 1)}
    reproduce("fgfl-ablation", seeds=3, **kwargs)
    after = {s: (cell / f"seed-{s}" / "summary.json").stat().st_mtime_ns for s in (0, 1)}
    assert after == before  # the finished seeds were kept, not retrained
    assert json.loads((cell / "summary.json").read_text())["seeds"] == [0, 1, 2]


class _Named:  # a cell as adopt_finished reads it
    class config:
        name = "cell"


def _finished_seed(runs: Path, seed: int, seconds: float) -> Future:
    """A worker's future for ``seed`` of the cell, trained in ``seconds`` and staged."""
    staged = runs / ".seeds" / f"cell-seed{seed}"
    (staged / f"seed-{seed}").mkdir(parents=True)
    (staged / f"seed-{seed}" / "summary.json").write_text("{}")
    future = Future()
    future.set_result((staged, seconds))
    return future


def test_a_failed_seed_does_not_cost_the_finished_ones_their_place(tmp_path):
    from graphfed.reproduce.execute import adopt_finished

    finished, failed = _finished_seed(tmp_path, 0, 1.0), Future()
    failed.set_exception(GraphfedError("checkpoint lacks server state ['x']"))
    tasks = {failed: (_Named, 1), finished: (_Named, 0)}
    with pytest.raises(GraphfedError, match=r"1 of 2 seeds failed .*cell seed 1: checkpoint"):
        adopt_finished([failed, finished], tasks, tmp_path, progress=False)
    assert (tmp_path / "cell" / "seed-0" / "summary.json").is_file()  # adopted all the same


def test_each_finished_seed_comes_with_the_time_the_rest_should_take(tmp_path, capsys):
    """The mean seed's time x the seeds left / the workers."""
    from graphfed.reproduce.execute import adopt_finished

    done = [_finished_seed(tmp_path, 0, 30.0), _finished_seed(tmp_path, 1, 90.0)]
    tasks = {f: (_Named, seed) for seed, f in enumerate([*done, Future(), Future()])}
    adopt_finished(done, tasks, tmp_path, progress=True, workers=2)
    assert capsys.readouterr().out.splitlines() == [
        "[1/4] cell seed 0 finished, about 45s left",  # 30 s x 3 / 2
        "[2/4] cell seed 1 finished, about 1m00s left"]  # 60 s x 2 / 2


@pytest.mark.parametrize(("spent", "left", "workers", "said"), [
    ([30.0, 40.0, 300.0], 4, 2, "about 1m20s left"),  # median 40 s x 4 / 2; a mean: 4m06s
    ([12.0], 1, 1, "about 12s left"),
    ([1800.0, 1900.0], 3, 1, "about 1h32m left"),  # 5,550 s
    ([5.0], 0, 2, "nothing left")])
def test_the_time_left_is_the_median_task_time_x_the_tasks_left_over_the_workers(
        spent, left, workers, said):
    from graphfed.reproduce.execute import time_left

    assert time_left(spent, left, workers) == said


@require("PROTEINS")
def test_a_reproduction_says_its_size_first_and_the_time_left_after_each_cell(tmp_path,
                                                                               capsys):
    kwargs = dict(methods=["self-train", "fedavg"], datasets=["PROTEINS"], out=tmp_path,
                  seeds=2, overrides=("rounds=1", "eval_every=1"))
    reproduce("fgfl-table2", **kwargs)
    lines = [line for line in capsys.readouterr().out.splitlines()
             if line.startswith(("plan:", "["))]
    assert lines[0] == "plan: 2 cells, 4 seed runs, 1 job"
    assert lines[1].startswith("[1/2] self-train-PROTEINS finished, about ")
    assert lines[2] == "[2/2] fedavg-PROTEINS finished, nothing left"
    reproduce("fgfl-table2", **kwargs)  # all reused: nothing trains, no time to estimate
    assert [line for line in capsys.readouterr().out.splitlines() if line.startswith("[")] == []
