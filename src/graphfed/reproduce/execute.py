"""Run a reproduction's cells: in this process, or each unfinished seed in a pool of worker
processes; and stop all of it at once on SIGINT or SIGTERM.

A stopped reproduction keeps what finished: every finished seed is in its cell, and a seed cut
short keeps its last checkpoint (written atomically), from which the same command resumes it.
"""

from __future__ import annotations

import multiprocessing
import shutil
import signal
import statistics
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from contextlib import contextmanager
from pathlib import Path
from types import FrameType

import torch

from graphfed.allocator import keep_freed_memory
from graphfed.errors import GraphfedError
from graphfed.launch import resume, run
from graphfed.reproduce.plan import Cell, keeps_its_seeds, seeds_to_train
from graphfed.serialization import read_json

STAGING = ".seeds"  # under OUT/runs: one run directory per seed trained by a worker
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
GRACE = 3.0  # seconds a worker has to end after SIGTERM before it is killed


class Interrupted(KeyboardInterrupt):
    """A stop signal ended the reproduction; its message says what was kept and how to go on."""


@contextmanager
def interruptible(out: Path) -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM stop it: the first raises ``KeyboardInterrupt``
    in the main thread (a worker pool ends its workers on the way out) and the block leaves as
    ``Interrupted``, whose one line says what ``out`` kept and how to go on. A repeat meanwhile
    is ignored, so ending the workers is not cut short and no traceback follows. SIGINT counts
    even where it was ignored when the process started (a background job). Outside the main
    thread, where no handler can be set, a signal does what it did before."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: FrameType | None) -> None:
        for each in STOP_SIGNALS:
            signal.signal(each, signal.SIG_IGN)
        raise KeyboardInterrupt

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        yield
    except KeyboardInterrupt:
        raise Interrupted(f"interrupted: the finished cells and checkpoints are kept in {out}; "
                          "the same command again continues from them") from None
    finally:
        for each, handler in previous.items():
            signal.signal(each, signal.SIG_DFL if handler is None else handler)


def run_cell(cell: Cell, runs: Path, progress: bool) -> bool:
    """Reuse a finished run of this exact config, resume an interrupted one, or start it;
    whether it trained (False: a finished run reused, which no time estimate should count).

    A run that differs only in its seeds keeps every finished seed: raising ``--repeats`` (or
    ``--seeds``) trains only the new ones, and lowering it retrains nothing."""
    path = runs / cell.config.name
    if not keeps_its_seeds(path, cell.config):
        cell.run_dir, cell.summary = run(cell.config, runs, progress=progress)
    elif (path / "summary.json").is_file():
        cell.run_dir, cell.summary = path, read_json(path / "summary.json", "run summary")
        return False
    else:
        cell.run_dir, cell.summary = resume(path, progress=progress)
    return True


def run_cells(cells: list[Cell], runs: Path, progress: bool, jobs: int,
              ray_address: str | None = None) -> None:
    """Run (or reuse, or resume) every cell. With ``jobs > 1`` every unfinished seed of every
    cell is a task of its own for that many worker processes, which share the machine's cores
    and its GPU: a worker trains the seed as a run under ``runs/.seeds`` (an interrupted one
    resumes there), the finished seed moves into its cell, and each cell's summary is then
    written from its seeds. With ``ray_address`` the same tasks run on that Ray cluster
    instead (``ray_cluster``). A seed's run depends on its config and seed alone, so the table
    is the one ``jobs = 1`` gives.

    With ``progress``, the plan's size comes first, then a line per finished seed (in a pool)
    or cell (otherwise) with the time the rest should take."""
    seeds = sum(len(cell.config.run_seeds) for cell in cells)
    pooled = False
    if jobs > 1 or ray_address:
        tasks = [(cell, seed) for cell in cells for seed in seeds_to_train(cell, runs)]
        pooled = bool(tasks) if ray_address else len(tasks) > 1
        if progress:
            where = f"Ray at {ray_address}" if ray_address else plan_size(len(cells), seeds, jobs)
            print(f"{where}, {len(tasks)} still to train", flush=True)
        if pooled and ray_address:
            from graphfed.reproduce.ray_cluster import train_on_ray

            train_on_ray(tasks, runs, progress, ray_address, train_seed, adopt_finished)
        elif pooled:
            _train_seeds(tasks, runs, progress, jobs)
    elif progress:
        print(plan_size(len(cells), seeds, jobs), flush=True)
    spent: list[float] = []
    for done, cell in enumerate(cells, 1):
        start = time.monotonic()
        if run_cell(cell, runs, progress) and progress and not pooled:
            spent.append(time.monotonic() - start)
            print(f"[{done}/{len(cells)}] {cell.config.name} finished, "
                  f"{time_left(spent, len(cells) - done, 1)}", flush=True)


def plan_size(cells: int, seeds: int, jobs: int) -> str:
    """The size of a reproduction's plan, said before any of it runs."""
    return (f"plan: {cells} cell{'s' * (cells != 1)}, {seeds} seed run{'s' * (seeds != 1)}, "
            f"{jobs} job{'s' * (jobs != 1)}")


def _train_seeds(tasks: list[tuple[Cell, int]], runs: Path, progress: bool, jobs: int) -> None:
    """Train ``tasks`` in a pool of ``jobs`` workers; on any exception (a stop signal's
    ``KeyboardInterrupt`` too) the queued seeds are cancelled and the workers ended first."""
    workers = min(jobs, len(tasks))
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_start_worker) as pool:
        try:
            # the workers start here, inheriting SIGINT blocked: only this process answers a
            # Ctrl-C (a terminal sends it to every worker too); one that came meanwhile is
            # delivered when the mask is restored
            mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
            try:
                futures = {pool.submit(train_seed, cell, seed, runs): (cell, seed)
                           for cell, seed in tasks}
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            adopt_finished(as_completed(futures), futures, runs, progress, workers)
        except BaseException:
            _end_workers(pool)
            raise


def _start_worker() -> None:
    """A worker's set-up: it ignores SIGINT (the parent ends it); it computes on one torch
    thread (the workers are the parallelism, and more threads would spin against each other;
    a run inside computes on its config's ``threads``, 1 unless a ``--set`` says otherwise);
    and the allocator the command line sets up (a spawned worker starts without it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    torch.set_num_threads(1)
    keep_freed_memory()


def _end_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued seeds and end the running ones: SIGTERM, then SIGKILL to a worker
    still there after ``GRACE`` seconds. The workers are this process's only children while
    the pool runs."""
    pool.shutdown(wait=False, cancel_futures=True)
    workers = multiprocessing.active_children()
    for worker in workers:
        worker.terminate()
    deadline = time.monotonic() + GRACE
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    for worker in workers:
        if worker.is_alive():
            worker.kill()
            worker.join()


def train_seed(cell: Cell, seed: int, runs: Path) -> tuple[Path, float]:
    """One seed of a cell as a run of its own under ``runs/.seeds`` (reused or resumed there
    like any cell); its directory, and the seconds it took here."""
    start = time.monotonic()
    config = cell.config.model_copy(update={"seeds": [seed], "seed": seed,
                                            "name": f"{cell.config.name}-seed{seed}"})
    staged = Cell(cell.variant, cell.dataset, config, cell.fold)
    run_cell(staged, runs / STAGING, progress=False)
    return staged.run_dir, time.monotonic() - start


def adopt_finished(completed: Iterable[Future], tasks: dict[Future, tuple[Cell, int]],
                   runs: Path, progress: bool, workers: int = 1) -> None:
    """Move every seed that finished into its cell as it completes, saying so with an estimate
    of the time left (``time_left``). A seed that failed does not cost the others theirs: they
    are all adopted, then the failures are raised together (a failed seed stays under
    ``runs/.seeds``, to resume from its last checkpoint)."""
    failed: list[str] = []
    spent: list[float] = []
    for done, future in enumerate(completed, 1):
        cell, seed = tasks[future]
        try:
            staged, seconds = future.result()
        except Exception as error:  # reported below, after the others are adopted
            failed.append(f"{cell.config.name} seed {seed}: {error}")
            continue
        _adopt_seed(staged, runs / cell.config.name, seed)
        spent.append(seconds)
        if progress:
            print(f"[{done}/{len(tasks)}] {cell.config.name} seed {seed} finished, "
                  f"{time_left(spent, len(tasks) - done, workers)}", flush=True)
    if failed:
        raise GraphfedError(f"{len(failed)} of {len(tasks)} seeds failed (the others are in "
                            f"their cells): " + "; ".join(failed))


def _adopt_seed(staged: Path, cell_dir: Path, seed: int) -> None:
    """Move a worker's finished seed into its cell's directory."""
    target = cell_dir / f"seed-{seed}"
    if target.exists():
        shutil.rmtree(target)
    shutil.move(str(staged / f"seed-{seed}"), str(target))
    shutil.rmtree(staged)


def time_left(spent: Sequence[float], left: int, workers: int) -> str:
    """``about 3m20s left``: the median of the finished tasks' times (one slow or resumed task
    moves it little) x the tasks left / the ``workers`` taking them at once; ``nothing left``
    at the end."""
    if left <= 0:
        return "nothing left"
    return f"about {_duration(statistics.median(spent) * left / workers)} left"


def _duration(seconds: float) -> str:
    """``1h05m``, ``3m20s`` or ``12s``."""
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes \
        else f"{secs}s"
