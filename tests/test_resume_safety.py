"""Faults and lies in-process (issue 53): checkpoints of another run, kills and full disks while
files are written, edited checkpoints, torn metrics, tracebacks with locals, stale checkpoints,
models that cannot fit and runs that fail in round 1. Each ends in one line and exit code 2 with
nothing lost, or in a repaired run identical to an uninterrupted one."""

from __future__ import annotations

import builtins
import errno
import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.config import load_config
from graphfed.experiment import resume_experiment, run_experiment
from graphfed.serialization import graph_classes, safe_load
from tests.conftest import REPO, error_line, interrupted_run, require
from tests.test_bad_input import snapshot

# the sequential engine: failing_clients makes FedAvgClient.fit fail, which it calls
BASE = ["configs/quickstart.yaml", "num_clients=3", "rounds=4", "checkpoint_every=1",
        "local_epochs=1", "engine=sequential"]
TIMING = {"train_seconds", "eval_seconds"}


def invoke(*args: str):
    return CliRunner().invoke(app, [*args, "--quiet"])


def config(*overrides: str):
    return load_config(BASE[0], [*BASE[1:], *overrides])


def records(run_dir: Path) -> list[dict]:
    """seed-0's rounds without their timings (what two runs of one config share)."""
    text = (run_dir / "seed-0" / "metrics.jsonl").read_text()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMING}
            for line in text.splitlines()]


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> Path:
    """The uninterrupted run every repaired one must equal."""
    run_dir, _ = run_experiment(config("name=whole"), tmp_path_factory.mktemp("whole"),
                                progress=False)
    return run_dir


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory) -> Path:
    """The same run stopped when round 3 started: seed-0 holds round 2's checkpoint."""
    return interrupted_run(config("name=cut"), tmp_path_factory.mktemp("cut"), at_round=3)


@pytest.fixture
def cut(tmp_path, interrupted) -> Path:
    """A copy of the interrupted run to damage."""
    return Path(shutil.copytree(interrupted, tmp_path / "cut"))


def checkpoint(run_dir: Path) -> Path:
    return run_dir / "seed-0" / "checkpoint.pt"


def failing_writes(monkeypatch, name: str, error: BaseException, after: int = 0) -> None:
    """Every file opened for writing whose name holds ``name`` (after the first ``after``)
    takes half of its first write, then ``error`` is raised: a kill or a full disk mid-write."""
    real_open = builtins.open
    opened = []

    class Dying:
        def __init__(self, handle):
            self.handle = handle

        def write(self, data):
            self.handle.write(data[: len(data) // 2])
            self.handle.flush()
            raise error

        def __getattr__(self, attr):
            return getattr(self.handle, attr)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

    def fake_open(file, mode="r", *args, **kwargs):
        handle = real_open(file, mode, *args, **kwargs)
        if name in os.fspath(file) and "w" in mode:
            opened.append(file)
            if len(opened) > after:
                return Dying(handle)
        return handle

    monkeypatch.setattr(builtins, "open", fake_open)
    monkeypatch.setattr(io, "open", fake_open)  # pathlib opens through io.open


# ----------------------------------------------------------------- 1: another run's checkpoint


def read_checkpoint(path: Path) -> dict:
    """A checkpoint read as graphfed reads one: plain data and graph classes only, never a
    full unpickle."""
    return safe_load(path, "checkpoint", graph_classes(), map_location="cpu")

@require("Cora")
@pytest.mark.parametrize(("override", "named"), [
    ("model.hidden=32", "model.hidden=32 (this run: 64)"),
    ("num_clients=4", "num_clients=4 (this run: 3)")])
def test_a_checkpoint_of_another_configuration_is_refused(tmp_path, cut, override, named):
    other = interrupted_run(config(override, "name=other"), tmp_path / "other", at_round=3)
    shutil.copy(checkpoint(other), checkpoint(cut))
    before = snapshot(cut)
    line = error_line(invoke("run", "--resume", str(cut)))
    assert "checkpoint.pt belongs to another run: its config has " + named in line
    assert snapshot(cut) == before


# ----------------------------------------------------------------- 2: a kill while resuming

@require("Cora")
def test_a_kill_while_resume_rewrites_the_metrics_loses_no_round(cut, whole, monkeypatch):
    before = snapshot(cut)
    with monkeypatch.context() as patch:
        failing_writes(patch, "metrics.jsonl", KeyboardInterrupt())
        with pytest.raises(KeyboardInterrupt):
            resume_experiment(cut, progress=False)
    assert snapshot(cut) == before  # rounds 1-2 kept, no temporary file left
    resume_experiment(cut, progress=False)
    assert records(cut) == records(whole)


# ----------------------------------------------------------------- 3: a full disk

@require("Cora")
def test_a_full_disk_while_checkpointing_is_one_line_and_keeps_the_last_checkpoint(
        tmp_path, whole, monkeypatch):
    out = tmp_path / "runs"
    with monkeypatch.context() as patch:  # round 1's checkpoint is written, round 2's is not
        failing_writes(patch, "checkpoint", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
                       after=1)
        line = error_line(invoke("run", *BASE, "name=full", "--out", str(out)))
    run_dir = out / "full"
    assert f"cannot write {checkpoint(run_dir)} (No space left on device)" in line
    assert f"graphfed run --resume {run_dir}" in line
    assert sorted(p.name for p in (run_dir / "seed-0").iterdir()) == ["checkpoint.pt",
                                                                        "metrics.jsonl"]
    assert read_checkpoint(checkpoint(run_dir))["round"] == 1
    result = invoke("run", "--resume", str(run_dir))  # space freed: nothing was lost
    assert result.exit_code == 0, result.output
    assert records(run_dir) == records(whole)


# ----------------------------------------------------------------- 4: a well-formed lie

def edited(**fields: object) -> Callable[[dict], None]:
    return lambda state: state.update(fields)


def without(key: str) -> Callable[[dict], None]:
    return lambda state: state.pop(key)


def fewer_clients(state: dict) -> None:
    state["runtime"]["clients"] = state["runtime"]["clients"][:2]


@require("Cora")
@pytest.mark.parametrize(("edit", "message"), [
    pytest.param(edited(round="2"), "has round '2'; this run's checkpoints hold a round from 1 "
                 "to 4", id="round a string"),
    pytest.param(edited(round=10**6), "has round 1000000; this run's checkpoints hold a round "
                 "from 1 to 4", id="round past the end"),
    pytest.param(edited(round=0), "has round 0", id="round zero"),
    pytest.param(edited(round=3), "records rounds 1-2, not rounds 1-3 that", id="round ahead of "
                 "the metrics"),
    pytest.param(edited(seconds=float("nan")), "has seconds nan", id="seconds not finite"),
    pytest.param(without("fingerprint"), "has no fingerprint of the run it belongs to",
                 id="no fingerprint"),
    pytest.param(fewer_clients, "holds 2 client states; this run has 3 clients",
                 id="client states missing"),
])
def test_a_checkpoint_with_a_wrong_field_is_one_line_and_changes_nothing(cut, edit, message):
    state = read_checkpoint(checkpoint(cut))
    edit(state)
    torch.save(state, checkpoint(cut))
    before = snapshot(cut)
    line = error_line(invoke("run", "--resume", str(cut)))
    assert message in line and "seed-0 again from round 1" in line
    assert snapshot(cut) == before


# ----------------------------------------------------------------- 5: torn metrics

@require("Cora")
def test_resume_drops_a_torn_last_line_and_rounds_after_the_checkpoint(cut, whole, caplog):
    metrics = cut / "seed-0" / "metrics.jsonl"
    third = json.dumps(json.loads((whole / "seed-0" / "metrics.jsonl").read_text()
                                  .splitlines()[2]))
    with metrics.open("a") as out:  # round 3 appended, round 4 cut short, no checkpoint after 2
        out.write(third + "\n" + '{"round": 4, "sampl')
    with caplog.at_level(logging.WARNING, logger="graphfed.checkpoints"):
        result = invoke("run", "--resume", str(cut))
    assert result.exit_code == 0, result.output
    assert records(cut) == records(whole)
    assert ("dropped a torn last line (a write cut short) and rounds 3 (after the "
            "checkpoint's) from metrics.jsonl; round 3 on runs again") in caplog.text


@require("Cora")
def test_damage_before_the_last_line_says_what_to_do(cut):
    metrics = cut / "seed-0" / "metrics.jsonl"
    metrics.write_text('{"round": 1, "sam\n' + metrics.read_text().splitlines()[1] + "\n")
    before = snapshot(cut)
    line = error_line(invoke("run", "--resume", str(cut)))
    assert "metrics.jsonl is damaged: not a readable metrics.jsonl (line 1:" in line
    assert f"delete {checkpoint(cut)} to run seed-0 again from round 1" in line
    assert snapshot(cut) == before


# ----------------------------------------------------------------- 6: no locals in tracebacks

def test_an_unexpected_error_prints_no_local_variables():
    script = """
import sys
import graphfed.launch

def broken(config, out, progress):
    held = "value-of-a-" + "local"
    raise RuntimeError("an unexpected failure")

graphfed.launch.run = broken
from graphfed.cli import main
sys.argv = ["graphfed", "run", "configs/quickstart.yaml", "--quiet"]
main()
"""
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 1
    assert "RuntimeError: an unexpected failure" in result.stderr
    assert "value-of-a-local" not in result.stderr


# ----------------------------------------------------------------- 7: stale checkpoints

@require("Cora")
def test_a_stop_after_a_seeds_summary_leaves_no_checkpoint_once_resumed(tmp_path, monkeypatch):
    real_unlink = Path.unlink

    def stop_before_removing_the_checkpoint(self, *args, **kwargs):
        if self.name == "checkpoint.pt":
            raise KeyboardInterrupt
        return real_unlink(self, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(Path, "unlink", stop_before_removing_the_checkpoint)
        with pytest.raises(KeyboardInterrupt):
            run_experiment(config("name=stale"), tmp_path, progress=False)
    run_dir = tmp_path / "stale"
    assert (run_dir / "seed-0" / "summary.json").exists() and checkpoint(run_dir).exists()
    result = invoke("run", "--resume", str(run_dir))
    assert result.exit_code == 0, result.output
    assert (run_dir / "summary.json").exists()
    assert not list(run_dir.rglob("checkpoint.pt"))


# ----------------------------------------------------------------- 8: sizes and failed runs

@require("Cora")
def test_a_model_too_big_for_memory_is_refused_before_allocation(tmp_path):
    out = tmp_path / "runs"
    line = error_line(invoke("run", *BASE, "model.hidden=1000000000", "--out", str(out)))
    assert "model.hidden=1000000000 (model.layers=2) makes a gcn model of" in line
    assert "choose a smaller model.hidden" in line
    assert not out.exists()


def failing_clients(monkeypatch, from_round: int) -> None:
    """Every FedAvg client fails from round ``from_round`` on (all three train each round)."""
    from graphfed.algorithms.averaging.fedavg import FedAvgClient

    real_fit, calls = FedAvgClient.fit, []

    def fit(self, message, ctx):
        calls.append(ctx.client_id)
        if len(calls) > 3 * (from_round - 1):
            raise RuntimeError("disk on fire")
        return real_fit(self, message, ctx)

    monkeypatch.setattr(FedAvgClient, "fit", fit)


@require("Cora")
def test_a_run_failing_in_round_one_says_so_and_leaves_no_run_directory(tmp_path, monkeypatch):
    failing_clients(monkeypatch, from_round=1)
    out = tmp_path / "runs"
    line = error_line(invoke("run", *BASE, "name=failed", "--out", str(out)))
    assert "the run failed: seed 0, round 1: no client returned a valid reply" in line
    assert "disk on fire" in line and "fix the cause and run again" in line
    assert "--resume" not in line
    assert not (out / "failed").exists()


@require("Cora")
def test_a_run_failing_after_a_checkpoint_says_how_to_resume(tmp_path, monkeypatch):
    failing_clients(monkeypatch, from_round=3)
    out = tmp_path / "runs"
    result = invoke("run", *BASE, "name=stopped", "--out", str(out))
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "run stopped: seed 0, round 3: no client returned a valid reply" in result.stderr
    assert f"resume with graphfed run --resume {out / 'stopped'}" in result.stderr
    assert read_checkpoint(checkpoint(out / "stopped"))["round"] == 2


def answers_sigint() -> None:
    """In the child before it starts: SIGINT at its default and unblocked, as a shell gives a
    foreground command. A pytest worker may hold it ignored or blocked (an earlier test's
    Ray, Flower or worker pool), and a child would inherit that and never see the Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@require("Cora")
def test_ctrl_c_on_a_run_names_its_directory_and_how_to_continue(tmp_path):
    """SIGINT mid-run: one line saying how to continue, exit code 130, no traceback; the
    directory was named when the run began, and --resume then finishes it."""
    (tmp_path / "runs" / "ctrlc").mkdir(parents=True)  # the name is taken: said at the start
    command = [sys.executable, "-m", "graphfed.cli", "run", "dataset=Cora", "num_clients=2",
               "rounds=400", "checkpoint_every=1", "eval_every=100", "name=ctrlc",
               "--out", str(tmp_path / "runs"), "--quiet"]
    process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=answers_sigint)
    checkpoint = tmp_path / "runs" / "ctrlc-2" / "seed-0" / "checkpoint.pt"
    deadline = time.monotonic() + 120
    while not checkpoint.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    first = stdout.splitlines()[0]
    assert first.startswith("run directory:") and "ctrlc-2" in first and "taken" in first
    assert stderr.strip() == (f"interrupted; graphfed run --resume {tmp_path / 'runs' / 'ctrlc-2'}"
                              " continues it from its last checkpoint")
