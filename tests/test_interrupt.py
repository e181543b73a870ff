"""Ctrl-C (SIGINT) or SIGTERM stops a reproduction at once: the queued seeds are cancelled, the
workers ended, what finished is kept, and the same command continues from it."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from graphfed.reproduce.execute import Interrupted, interruptible
from tests.conftest import require

PROC = Path("/proc")
CELL = "self-train-PROTEINS"


def live_group(pgid: int) -> list[int]:
    """The processes of group ``pgid`` still running (a zombie has ended), read from /proc."""
    alive = []
    for stat in PROC.glob("[0-9]*/stat"):
        try:  # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses
            state, _, group = stat.read_text().rsplit(")", 1)[1].split()[:3]
        except (OSError, IndexError):
            continue  # ended while being read
        if int(group) == pgid and state != "Z":
            alive.append(int(stat.parent.name))
    return alive


def wait_for(condition, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@pytest.mark.skipif(not (PROC / "self" / "stat").is_file(), reason="reads processes from /proc")
@require("PROTEINS")
def test_sigint_ends_the_workers_keeps_the_finished_seeds_and_the_same_command_goes_on(
        tmp_path):
    out = tmp_path / "r"
    command = [sys.executable, "-m", "graphfed.cli", "reproduce", "fgfl-ablation", "--methods",
               "self-train", "--seeds", "4", "--jobs", "2", "--set", "rounds=2",
               "--set", "eval_every=2", "--out", str(out)]
    cell = out / "runs" / CELL

    def finished() -> dict[str, int]:
        return {p.parent.name: p.stat().st_mtime_ns for p in cell.glob("seed-*/summary.json")}

    with (tmp_path / "stdout").open("w") as stdout, (tmp_path / "stderr").open("w") as stderr:
        # a session of its own: its process group is the command and every process it starts
        first = subprocess.Popen(command, stdout=stdout, stderr=stderr, start_new_session=True)
        try:
            assert wait_for(lambda: finished() or first.poll() is not None, 120)
            assert first.poll() is None, "the run ended before any seed finished"
            kept = finished()
            assert len(live_group(first.pid)) >= 3  # the command and its two workers
            os.kill(first.pid, signal.SIGINT)  # the parent alone: it must end the workers
            stopping = time.monotonic()
            code = first.wait(timeout=30)
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
    assert code == 130 and time.monotonic() - stopping < 10
    lines = (tmp_path / "stderr").read_text().splitlines()
    assert len(lines) == 1 and "same command again continues" in lines[0], lines
    assert wait_for(lambda: not live_group(first.pid), 3), "processes of the run still there"
    assert finished().items() >= kept.items()  # every finished seed kept, none retrained

    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "Traceback" not in again.stderr
    assert json.loads((cell / "summary.json").read_text())["seeds"] == [0, 1, 2, 3]
    assert finished().items() >= kept.items()  # the kept seeds were used, not trained again
    assert list((out / "runs" / ".seeds").iterdir()) == []
    assert (out / "table.csv").is_file()


@pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                    reason="signal handlers are set in the main thread only")
def test_sigterm_ends_the_block_once_as_interrupted_and_a_repeat_is_ignored(tmp_path):
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    reached = []
    with pytest.raises(Interrupted, match=re.escape(f"kept in {tmp_path}; the same command")), \
            interruptible(tmp_path):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(10)  # the handler raises long before
            reached.append("after the signal")
        finally:  # ending the workers: a repeat of either signal meanwhile is ignored
            os.kill(os.getpid(), signal.SIGINT)
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.2)
            reached.append("cleaned up")
    assert reached == ["cleaned up"]
    assert {s: signal.getsignal(s) for s in before} == before
