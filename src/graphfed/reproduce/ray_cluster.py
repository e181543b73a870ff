"""Seeds trained as tasks on an existing Ray cluster, for a grid that one machine cannot hold.

Each unfinished seed is one Ray task (one CPU) that runs exactly what a ``--jobs`` worker runs
(``execute.train_seed``, handed over by ``execute``): the seed as a run under ``OUT/runs/.seeds``,
resumed there if it was interrupted, then moved into its cell here as it finishes. The table is
therefore the one ``--jobs 1`` gives, and a stopped reproduction continues from what it kept.
Every node of the cluster must see ``OUT`` and ``GRAPHFED_DATA`` at the same paths (one
machine, or a shared file system) and have graphfed installed: a task writes its run where the
driver reads it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterable
from concurrent.futures import Future, as_completed
from pathlib import Path
from typing import Any

from graphfed.errors import GraphfedError
from graphfed.reproduce.plan import Cell

# what ``execute`` hands over: how a seed trains, and how finished seeds join their cells
Train = Callable[[Cell, int, Path], tuple[Path, float]]
Adopt = Callable[[Iterable[Future], dict[Future, tuple[Cell, int]], Path, bool, int], None]


def connect(address: str) -> Any:
    """The ``ray`` module, connected to the cluster at ``address`` (``auto``: the one this
    machine runs); one line instead of a traceback when Ray is missing or nothing answers."""
    try:
        import ray
    except ImportError:
        raise GraphfedError("--ray needs Ray, which is not installed; it comes with "
                            "pip install 'graphfed[flower]'") from None
    if not ray.is_initialized():
        _answers(address)
        try:  # the tasks inherit this process's data root, wherever the cluster started
            ray.init(address=address, log_to_driver=False, runtime_env={"env_vars": {
                k: v for k, v in os.environ.items() if k == "GRAPHFED_DATA"}})
        except (ConnectionError, ValueError, RuntimeError) as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise GraphfedError(f"--ray {address}: no Ray cluster answered ({first}); start "
                                "one with `ray start --head` or give its address") from None
    return ray


def _answers(address: str, timeout: float = 3.0) -> None:
    """Refuse a ``host:port`` nobody listens on at once: Ray itself retries such an address
    for minutes before it gives up. ``auto`` and ``ray://`` addresses are Ray's to check."""
    host, _, port = address.rpartition(":")
    if address == "auto" or "://" in address or not port.isdigit():
        return
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout).close()
    except OSError as error:
        reason = error.strerror or str(error)
        raise GraphfedError(f"--ray {address}: no Ray cluster answered ({reason}); start one "
                            "with `ray start --head` or give its address") from None


def cluster_cpus(ray: Any) -> int:
    """The cluster's CPUs: how many seeds run at once (for the time estimate)."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def train_on_ray(tasks: list[tuple[Cell, int]], runs: Path, progress: bool, address: str,
                 train: Train, adopt: Adopt) -> None:
    """Train ``tasks`` as Ray tasks, each with ``train`` (a pool worker's task), and ``adopt``
    each finished seed into its cell; on any exception (a stop signal too) the tasks still
    queued or running are cancelled first."""
    ray = connect(address)
    remote = ray.remote(num_cpus=1)(_seed_task)
    refs = [remote.remote(train, cell, seed, runs) for cell, seed in tasks]
    futures: dict[Future, tuple[Cell, int]] = {
        ref.future(): task for ref, task in zip(refs, tasks, strict=True)}
    try:
        adopt(as_completed(futures), futures, runs, progress, cluster_cpus(ray))
    except BaseException:
        for ref in refs:
            ray.cancel(ref, force=True)
        raise


def _seed_task(train: Train, cell: Cell, seed: int, runs: Path) -> tuple[Path, float]:
    """On a Ray worker: one torch thread (the tasks are the parallelism), then the seed."""
    import torch

    torch.set_num_threads(1)
    return train(cell, seed, runs)
