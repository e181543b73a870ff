"""Experiment trackers: a quickstart run streamed to TensorBoard and MLflow holds, as their own
readers read it back, every round of its metrics.jsonl, its config and its summary; a resume
continues both without repeating a round; a missing package is one line and exit code 2; a
tracker that fails costs the run nothing."""

import json
import logging
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.config import load_config
from graphfed.experiment import resume_experiment, run_experiment
from tests.conftest import REPO, require

runner = CliRunner()
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")
SMALL = ["dataset=Cora", "num_clients=3", "device=cpu", "name=r"]


def _need(module: str) -> None:
    pytest.importorskip(module, reason=f"{module} is not installed: pip install "
                        f"'graphfed[{module}]'")


def _lines(run_dir):
    text = (run_dir / "seed-0" / "metrics.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


def _expected(lines: list[dict]) -> dict[str, dict[int, float]]:
    """Every run-level number of metrics.jsonl, by key and round."""
    out: dict[str, dict[int, float]] = {}
    for line in lines:
        for key, value in line.items():
            if key != "round" and isinstance(value, int | float) and not isinstance(value, bool):
                out.setdefault(key, {})[line["round"]] = value
    return out


def _tensorboard(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    return EventAccumulator(str(folder)).Reload()


def _mlflow(run_dir):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{run_dir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(run_dir.name)
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 1  # one run per seed, a resume included
    return client, runs[0]


def _history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """The quickstart, 2 rounds on 3 clients, with both trackers (``--log`` given twice)."""
    _need("tensorboard")
    _need("mlflow")
    out = tmp_path_factory.mktemp("runs")
    result = runner.invoke(app, ["run", QUICKSTART, "rounds=2", "num_clients=3", "device=cpu",
                                 "--log", "tensorboard", "--log", "mlflow", "--out", str(out),
                                 "--quiet"])
    assert result.exit_code == 0, result.output
    run_dir = out / "quickstart"
    return run_dir, _lines(run_dir), json.loads((run_dir / "seed-0" / "summary.json").read_text())


@require("Cora")
def test_tensorboard_events_hold_every_round_the_config_and_the_summary(tracked):
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    run_dir, lines, summary = tracked
    events = _tensorboard(run_dir / "seed-0" / "tensorboard")
    expected = _expected(lines)
    assert {"train_loss", "test_acc", "val_acc", "bytes_up"} <= set(expected)
    assert len(expected["test_acc"]) == 2
    logged = {tag for tag in events.Tags()["scalars"] if not tag.startswith("final/")}
    assert logged == set(expected)
    for key, rounds in expected.items():  # TensorBoard keeps scalars as float32
        assert {e.step: e.value for e in events.Scalars(key)} == pytest.approx(rounds, rel=1e-6)
    assert events.Scalars("final/test_acc")[-1].value == pytest.approx(
        summary["final"]["test_acc"], rel=1e-6)
    session = HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/session_start_info"])
    hparams = session.session_start_info.hparams
    assert hparams["algorithm"].string_value == "fedavg"
    assert hparams["model.hidden"].number_value == 64


@require("Cora")
def test_mlflow_run_holds_every_round_the_config_and_the_summary(tracked):
    run_dir, lines, summary = tracked
    client, run = _mlflow(run_dir)
    assert run.info.run_id == (run_dir / "seed-0" / "mlflow-run-id").read_text().strip()
    assert (run.info.run_name, run.info.status) == ("seed-0", "FINISHED")
    for key, rounds in _expected(lines).items():
        assert _history(client, run.info.run_id, key) == sorted(rounds.items()), key
    params = run.data.params
    assert (params["algorithm"], params["model.hidden"], params["num_clients"]) == (
        "fedavg", "64", "3")
    assert run.data.metrics["final/test_acc"] == summary["final"]["test_acc"]
    artifact = client.download_artifacts(run.info.run_id, "summary.json",
                                         str(run_dir / "download"))
    assert json.loads(Path(artifact).read_text()) == summary


@require("Cora")
def test_a_resumed_run_continues_both_trackers_without_repeating_a_round(tmp_path,
                                                                         monkeypatch):
    _need("tensorboard")
    _need("mlflow")
    from graphfed import experiment

    config = load_config(None, [*SMALL, "rounds=4", "checkpoint_every=2",
                                "log=tensorboard,mlflow"])
    original = experiment.Federation.fit_round

    def crash_at_round_4(self, rnd):
        if rnd == 4:  # rounds 1-3 are logged, the checkpoint holds round 2
            raise KeyboardInterrupt
        return original(self, rnd)

    monkeypatch.setattr(experiment.Federation, "fit_round", crash_at_round_4)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, tmp_path, progress=False)
    run_dir = tmp_path / "r"
    client, run = _mlflow(run_dir)
    assert run.info.status == "KILLED"
    assert [step for step, _ in _history(client, run.info.run_id, "train_loss")] == [1, 2, 3]
    monkeypatch.setattr(experiment.Federation, "fit_round", original)

    resume_experiment(run_dir, progress=False)
    expected = _expected(_lines(run_dir))
    client, run = _mlflow(run_dir)
    assert run.info.status == "FINISHED"
    events = _tensorboard(run_dir / "seed-0" / "tensorboard")
    for key in ("train_loss", "test_acc", "bytes_up"):
        rounds = sorted(expected[key].items())
        assert [r for r, _ in rounds] == [1, 2, 3, 4]
        assert _history(client, run.info.run_id, key) == rounds
        tensorboard = [(e.step, e.value) for e in events.Scalars(key)]
        assert [s for s, _ in tensorboard] == [1, 2, 3, 4]
        assert [v for _, v in tensorboard] == pytest.approx([v for _, v in rounds], rel=1e-6)


@pytest.mark.parametrize(("name", "shown"), [("mlflow", "MLflow"),
                                             ("tensorboard", "TensorBoard")])
def test_a_missing_tracker_package_is_one_line_and_exit_code_2(tmp_path, monkeypatch, name,
                                                               shown):
    monkeypatch.setitem(sys.modules, name, None)  # as if not installed: importing it fails
    result = runner.invoke(app, ["run", "rounds=1", "--log", name, "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert f"--log {name} needs {shown}: pip install 'graphfed[{name}]'" in result.output
    assert "Traceback" not in result.output
    assert not any(tmp_path.iterdir())  # refused before the run directory is made


def test_an_unknown_tracker_is_one_line_and_exit_code_2(tmp_path):
    result = runner.invoke(app, ["run", "rounds=1", "--log", "tensorboard,wandb",
                                 "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--log wandb: unknown tracker; choose from tensorboard, mlflow" in result.output


@require("Cora")
@pytest.mark.parametrize("where", ["opening", "round 2"])
def test_a_failing_tracker_warns_once_and_the_run_completes(tmp_path, monkeypatch, caplog,
                                                            where):
    _need("tensorboard")
    overrides = [*SMALL, "rounds=3", "log.trackers=[tensorboard]"]
    if where == "opening":  # its folder cannot be made: a file stands in the way
        (tmp_path / "file").write_text("")
        overrides.append(f"log.tensorboard_dir={tmp_path / 'file'}")
    else:  # the disk fills up as round 2 is logged
        from torch.utils.tensorboard import SummaryWriter

        add_scalar = SummaryWriter.add_scalar

        def full_at_round_2(self, tag, value, step, *args, **kwargs):
            if step == 2:
                raise OSError(28, "No space left on device")
            return add_scalar(self, tag, value, step, *args, **kwargs)

        monkeypatch.setattr(SummaryWriter, "add_scalar", full_at_round_2)
    with caplog.at_level(logging.WARNING, logger="graphfed.trackers"):
        run_dir, _ = run_experiment(load_config(None, overrides), tmp_path / "runs",
                                    progress=False)
    warnings = [r.getMessage() for r in caplog.records if r.name == "graphfed.trackers"]
    assert len(warnings) == 1 and warnings[0].startswith("--log tensorboard stopped: ")
    assert (run_dir / "summary.json").is_file()
    assert [line["round"] for line in _lines(run_dir)] == [1, 2, 3]


@pytest.mark.parametrize(("overrides", "trackers"), [
    (["log=mlflow"], ["mlflow"]),
    (["log=tensorboard,mlflow", "log.clients=true"], ["tensorboard", "mlflow"]),
    (["log=[mlflow, mlflow]"], ["mlflow"]),
    (["log.trackers=[mlflow]", "log=tensorboard"], ["tensorboard"]),  # the later one wins
    (["log="], []),
])
def test_the_log_section_takes_the_trackers_alone(overrides, trackers):
    assert load_config(None, overrides).log.trackers == trackers
