"""``graphfed sweep`` on real Cora (Metis, 3 clients, 2 rounds): every method gets the same number
of trials, the search reads validation numbers only, the winner's config re-runs its cell, a
stopped or extended sweep trains only what is missing, the grid does not depend on --jobs, and
bad input is one line with exit code 2."""

from __future__ import annotations

import csv
import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from graphfed.cli import app
from tests.conftest import require

pytest.importorskip("optuna", reason="Optuna is not installed (pip install '.[sweep]')")
pytestmark = require("Cora")

runner = CliRunner()
BASE = ("configs/quickstart.yaml", "rounds=2", "num_clients=3", "partition=metis")
METHODS = "fedavg,fedprox,local"


def sweep(out: Path, *options: str, methods: str = METHODS, budget: int = 2, seeds: int = 2):
    return runner.invoke(app, ["sweep", *BASE, "--methods", methods, "--budget", str(budget),
                               "--seeds", str(seeds), "--out", str(out), "--quiet", *options])


def table(out: Path) -> list[dict]:
    with (out / "table.csv").open() as f:
        return list(csv.DictReader(f))


def trials(out: Path) -> list[dict]:
    with (out / "trials.csv").open() as f:
        return list(csv.DictReader(f))


def study(out: Path, method: str):
    import optuna

    return optuna.load_study(study_name=method, storage=f"sqlite:///{out.resolve()}/study.db")


def metrics(path: Path) -> list[dict]:
    from graphfed.serialization import read_metrics

    return read_metrics(path / "metrics.jsonl")


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("sweep") / "out"
    result = sweep(out)
    assert result.exit_code == 0, result.output
    return out


def test_every_method_gets_the_same_budget(swept):
    from optuna.trial import TrialState

    from graphfed.reproduce.write import COLUMNS

    rows = table(swept)
    assert tuple(rows[0]) == (*COLUMNS, "trials")
    assert [(r["method"], r["trials"], r["n_seeds"]) for r in rows] == [
        (m, "2", "2") for m in METHODS.split(",")]
    assert all(r["select"] == "max_val_acc" and r["ci_low"] for r in rows)
    for method in METHODS.split(","):
        done = study(swept, method).get_trials(states=(TrialState.COMPLETE,))
        assert sorted(t.user_attrs["slot"] for t in done) == [0, 1]
    # FedProx searches its own mu besides the shared keys; the shared space is the same for all
    listed = trials(swept)
    assert {r["method"] for r in listed if r["fedprox.mu"]} == {"fedprox"}
    assert {(r["optimizer.lr"], r["local_epochs"]) for r in listed if r["method"] == "fedavg"} \
        == {(r["optimizer.lr"], r["local_epochs"]) for r in listed if r["method"] == "local"}


def test_sweep_json_records_how_the_table_was_made(swept):
    from graphfed.data.heterogeneity import is_card

    about = json.loads((swept / "sweep.json").read_text())
    assert (about["dataset"], about["protocol"], about["methods"]) == (
        "Cora", "metis-K3", METHODS.split(","))
    assert (about["budget"], about["sampler"], about["objective"], about["rule"],
            about["seeds"]) == (2, "grid", "val_acc", "max_val_acc", [0, 1])
    assert is_card(about["heterogeneity"]) and about["heterogeneity"]["clients"] == 3
    assert about["run_seconds"] > 0 and "preset" not in about


class Recording(dict):
    """A metrics line that notes every key read from it; reading it whole counts as ``*``."""

    def __init__(self, data: dict, seen: set[str]):
        super().__init__(data)
        self.seen = seen

    def __getitem__(self, key):
        self.seen.add(key)
        return super().__getitem__(key)

    def __contains__(self, key):
        self.seen.add(key)
        return super().__contains__(key)

    def get(self, key, default=None):
        self.seen.add(key)
        return super().get(key, default)

    def whole(self, *args):
        self.seen.add("*")
        raise AssertionError("the objective read a whole metrics line")

    items = values = keys = __iter__ = whole


@pytest.mark.parametrize("name", ["val_acc", "val_loss"])
def test_the_objective_reads_no_test_number(swept, name):
    from graphfed.sweep.objective import OBJECTIVES

    lines = metrics(swept / "trials" / "fedavg-t000" / "seed-0")
    seen: set[str] = set()
    value = OBJECTIVES[name].score([Recording(line, seen) for line in lines])
    assert not [k for k in seen if k.startswith("test") or k == "*"], seen
    key = "val_acc" if name == "val_acc" else "val_loss_pooled"
    pick = max if name == "val_acc" else min
    assert value == pick(line[key] for line in lines)


def test_the_best_config_reruns_the_reported_cell(swept, tmp_path):
    from graphfed.config import load_config
    from graphfed.metrics import mean_std
    from graphfed.reproduce.selection import selected_round

    best = swept / "best" / "fedprox.yaml"
    config = load_config(best)
    assert config.algorithm == "fedprox" and config.seeds == [0, 1]
    chosen = next(r for r in trials(swept) if r["method"] == "fedprox"
                  and float(r["fedprox.mu"]) == config.methods["fedprox"].mu
                  and float(r["optimizer.lr"]) == config.optimizer.lr)
    result = runner.invoke(app, ["run", str(best), "seeds=[0]", "--out", str(tmp_path),
                                 "--quiet"])
    assert result.exit_code == 0, result.output
    ours = metrics(tmp_path / config.name / "seed-0")
    final = [metrics(swept / "final" / "fedprox" / f"seed-{s}") for s in (0, 1)]
    assert [line["test_acc"] for line in ours] == [line["test_acc"] for line in final[0]]
    # the trial ran on seed 0: its validation value is that of the final seed 0
    assert float(chosen["value"]) == max(line["val_acc"] for line in ours)
    reported = next(r for r in table(swept) if r["method"] == "fedprox")
    at_best = [selected_round("max_val_acc", lines, "test_acc")["test_acc"] for lines in final]
    assert float(reported["ours_mean"]) == pytest.approx(mean_std(at_best)[0], abs=5e-5)


def test_a_stopped_or_extended_sweep_trains_only_what_is_missing(swept, tmp_path):
    """Budget 2 -> 3 trains one trial more; a trial a killed sweep left running is asked again
    with its own values and slot, and no finished trial is trained again."""
    from optuna.trial import TrialState

    from graphfed.algorithms.registry import get_algorithm
    from graphfed.sweep.space import distributions, grid, method_space
    from graphfed.sweep.study import SLOT

    out = tmp_path / "out"
    shutil.copytree(swept, out)
    finished = {p: p.stat().st_mtime_ns for p in (out / "trials").glob("fedavg-t*/summary.json")}
    space = method_space(get_algorithm("fedavg"))
    point = grid(space, 3, "fedavg")[2]
    killed = study(out, "fedavg")
    killed.enqueue_trial(point, user_attrs={SLOT: 2})
    killed.ask(distributions(space))  # left RUNNING, as by a sweep killed while it trained
    result = sweep(out, methods="fedavg", budget=3)
    assert result.exit_code == 0, result.output
    states = [(t.user_attrs[SLOT], t.state) for t in study(out, "fedavg").get_trials()]
    assert states == [(0, TrialState.COMPLETE), (1, TrialState.COMPLETE), (2, TrialState.FAIL),
                      (2, TrialState.COMPLETE)]
    assert {p: p.stat().st_mtime_ns for p in finished} == finished  # none trained again
    redone = next(r for r in trials(out) if r["method"] == "fedavg" and r["slot"] == "2")
    assert float(redone["optimizer.lr"]) == point["optimizer.lr"]
    assert [r["trials"] for r in table(out)] == ["3"]
    again = sweep(out, methods="fedavg", budget=3)  # finished: nothing left to train
    assert again.exit_code == 0 and len(study(out, "fedavg").get_trials()) == 4


def test_the_grid_does_not_depend_on_jobs(swept, tmp_path):
    out = tmp_path / "jobs2"
    result = sweep(out, "--jobs", "2", methods="fedprox")
    assert result.exit_code == 0, result.output
    assert table(out) == [r for r in table(swept) if r["method"] == "fedprox"]
    assert trials(out) == [r for r in trials(swept) if r["method"] == "fedprox"]


def test_tpe_gives_every_method_its_budget(tmp_path):
    out = tmp_path / "tpe"
    result = sweep(out, "--sampler", "tpe", methods="fedavg,local", budget=2, seeds=1)
    assert result.exit_code == 0, result.output
    assert [(r["method"], r["trials"]) for r in table(out)] == [("fedavg", "2"), ("local", "2")]
    assert {yaml.safe_load((out / "best" / f"{m}.yaml").read_text())["algorithm"]
            for m in ("fedavg", "local")} == {"fedavg", "local"}


def test_declared_ranges_are_valid_options():
    """Every range an algorithm declares, and the shared ones, give values its config takes;
    a larger budget extends a smaller one's grid."""
    from graphfed.algorithms.registry import load_all
    from graphfed.config import load_config, with_overrides
    from graphfed.sweep.space import SHARED, declared, grid, method_space

    ranges = {key: r for a in load_all().values() for key, r in declared(a).items()}
    assert "fedprox.mu" in ranges and len(ranges) <= 5
    assert ranges["fedprox.mu"].grid() == [0.001, 0.01, 0.1, 1.0]
    base = load_config(None, ["dataset=Cora"])
    for key, searched in {**SHARED, **ranges}.items():
        algorithm = key.split(".")[0] if key in ranges else "fedavg"
        for value in searched.grid():
            with_overrides(base, {"algorithm": algorithm, key: value})
    space = method_space(load_all()["fedprox"])
    assert grid(space, 5, "fedprox")[:3] == grid(space, 3, "fedprox")


def test_a_changed_space_is_refused(swept, monkeypatch):
    from graphfed.sweep.space import SHARED, Range

    monkeypatch.setitem(SHARED, "model.dropout", Range(low=0.0, high=0.5, points=3,
                                                       source="test"))
    result = sweep(swept)
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"error: study fedavg in sqlite:///{swept.resolve()}/study.db was made for another "
        "sweep (changed: search space); use another --out or --storage"]


BAD = [
    (("--methods", "fedavg,nope"), "unknown algorithm 'nope'"),
    (("--methods", "fedavg,FedAvg"), "--methods names a method twice"),
    (("--budget", "0"), "--budget must be at least 1, got 0"),
    (("--sampler", "random"), "unknown sampler 'random'; choose one of: grid, tpe"),
    (("--objective", "test_acc"), "unknown objective 'test_acc'; choose one of: val_acc"),
    (("--jobs", "0"), "--jobs must be at least 1"),
    (("--budget", "1000"), "--budget 1000: the grid of fedavg has only 180 points"),
    (("--storage", "nosuch://db"), "--storage nosuch://db:"),
    (("rounds=many",), "rounds: Input should be a valid integer"),
]


@pytest.mark.parametrize(("extra", "message"), BAD)
def test_bad_input_is_one_line_and_exit_2(tmp_path, extra, message):
    options = dict(zip(extra[::2], extra[1::2], strict=False)) if extra[0].startswith("--") \
        else {}
    args = ["sweep", *BASE, *([] if options else extra), "--methods",
            options.pop("--methods", "fedavg"), "--budget", options.pop("--budget", "2"),
            "--out", str(tmp_path / "out"), "--quiet",
            *(x for pair in options.items() for x in pair)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert len(result.output.strip().splitlines()) == 1 and message in result.output, \
        result.output
    assert not list((tmp_path / "out" / "trials").glob("*"))


def test_missing_budget_and_missing_optuna_are_one_line(tmp_path, monkeypatch):
    result = runner.invoke(app, ["sweep", *BASE, "--methods", "fedavg"])
    assert result.exit_code == 2 and "--budget N is required" in result.output
    monkeypatch.setitem(sys.modules, "optuna", None)
    result = sweep(tmp_path / "out", methods="fedavg")
    assert result.exit_code == 2
    assert result.output.strip() == ("error: graphfed sweep needs Optuna: pip install "
                                     "'graphfed[sweep]'")
