"""One writer per run directory.

Two processes writing one run directory (two ``--resume`` of it, or a resume while the run still
goes on) interleave ``metrics.jsonl`` and overwrite each other's checkpoints. The writer holds an
exclusive lock on ``RUN_DIR/.lock`` (an ``flock`` through ``filelock``) for as long as it writes;
the operating system drops the lock with its process, so a crash leaves no stale lock behind.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock, Timeout

from graphfed.errors import GraphfedError

LOCK_FILE = ".lock"
OWNER_FILE = ".lock.owner"  # who holds it, for the message: a lock file is not read while held


class RunDirInUse(GraphfedError):
    """Another process writes this run directory."""


@contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir`` exclusively, or raise ``RunDirInUse`` at once (never wait)."""
    lock = FileLock(run_dir / LOCK_FILE)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise RunDirInUse(f"run directory {run_dir} is in use by another graphfed process "
                          f"({_owner(run_dir)}); wait for it to end or stop it") from None
    except OSError as e:
        raise GraphfedError(f"cannot lock run directory {run_dir}: {e.strerror}") from None
    owner = run_dir / OWNER_FILE
    try:
        owner.write_text(f"pid {os.getpid()} on {socket.gethostname()}\n")
        yield
    finally:
        owner.unlink(missing_ok=True)
        lock.release()


def _owner(run_dir: Path) -> str:
    try:
        return (run_dir / OWNER_FILE).read_text().strip() or "pid unknown"
    except OSError:
        return "pid unknown"
