"""Where a batched round's host time goes, on the host-bound case of ``round_time.py``
(``fedavg-gcn-csbm1k-10-host``: Cora's round in miniature, whose arithmetic is next to
nothing, so its time is the host's, as on a GPU with small clients):

    GRAPHFED_DATA=../shared/datasets OMP_NUM_THREADS=1 python benchmarks/host_round.py
        [--rounds 300] [--plan cpu|accelerator] [--free-replays]

prints ``RESULT part=round ms=... epoch_ms=... ratio=...`` (the median round, the median
centralized epoch over the same data and their ratio) and one ``RESULT part=... ms=...`` line
a timed part (its mean time a round; parts nest: ``stacked_forward`` holds ``weighted_sum`` and
``dropout``, ``deliver_fit`` holds ``train_together``; ``preserved_rngs`` is the time spent
keeping the random streams' states and giving them back, not the blocks it wraps). To time
older code, copy this file and ``round_time.py`` into its checkout's ``benchmarks/`` and run it
there with ``PYTHONPATH=src``.

``--free-replays`` (with ``cuda_graphs``) times what the host does in a recorded round: the
recording is made as on a GPU (the CPU's checked emulation, ``training.replay``), then every
replay costs nothing and returns the recording's outputs unchanged, as a GPU's replay is one
launch that the host does not wait for. Its training is then meaningless; its time is the
host's part of a recorded round, the part a GPU cannot hide.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import statistics
import time

from round_time import CASES, central_epoch

from graphfed.config import load_config
from graphfed.experiment import build_federation

CASE = "fedavg-gcn-csbm1k-10-host"


def timing(spent: dict[str, list[float]], name: str, fn):
    """``fn``, its wall time of every call added to ``spent[name]``."""
    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name].append(time.perf_counter() - start)

    return timed


def timing_context(spent: dict[str, list[float]], name: str, factory):
    """``factory``'s context manager, the time of its entry and exit (not of its block) added to
    ``spent[name]`` every use."""
    @contextlib.contextmanager
    def timed(*args, **kwargs):
        start = time.perf_counter()
        with factory(*args, **kwargs):
            own = time.perf_counter() - start
            yield
            start = time.perf_counter()
        spent[name].append(own + time.perf_counter() - start)

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--plan", choices=("cpu", "accelerator"), default="accelerator",
                        help="the batched engine's layout: this CPU's, or a GPU's")
    parser.add_argument("--free-replays", action="store_true",
                        help="record training (cuda_graphs) and count each replay as free")
    args = parser.parse_args()
    from graphfed import seeding
    from graphfed.models import gnn
    from graphfed.runtime import base, simulation
    from graphfed.training import plans, replay, stacked_losses

    if args.plan == "accelerator":
        plans.for_device = lambda device: plans.ACCELERATOR_PLAN
    if args.free_replays:
        replay.CHECK_ON_CPU = True
        replay.Replay._replay = lambda self: self._outputs
    spent: dict[str, list[float]] = collections.defaultdict(list)
    for module, name in ((simulation, "train_together"), (stacked_losses, "stacked_forward"),
                         (gnn, "weighted_sum"), (gnn, "dropout"), (base, "finite_messages"),
                         (base, "check_message")):
        setattr(module, name, timing(spent, name, getattr(module, name)))
    for module in (simulation, seeding):  # the callers' streams kept and given back
        module.preserved_rngs = timing_context(spent, "preserved_rngs", seeding.preserved_rngs)
    config = load_config(None, [*CASES[CASE], "checkpoint_every=0", "device=cpu",
                                "engine=batched", f"cuda_graphs={args.free_replays}"])
    fed = build_federation(config, seed=0)
    runtime = fed.runtime
    for name in ("_steps", "deliver_fit"):
        setattr(runtime, name, timing(spent, name, getattr(runtime, name)))
    for rnd in (1, 2, 3):  # warm-up: caches built once per run are not a round's work
        fed.fit_round(rnd)
    epoch = central_epoch(fed)
    epochs = [0.0] * args.rounds
    for i in range(args.rounds):
        start = time.perf_counter()
        epoch()
        epochs[i] = time.perf_counter() - start
    spent.clear()
    rounds = []
    for rnd in range(4, 4 + args.rounds):
        start = time.perf_counter()
        fed.fit_round(rnd)
        rounds.append(time.perf_counter() - start)
    round_ms, epoch_ms = statistics.median(rounds) * 1e3, statistics.median(epochs) * 1e3
    print(f"RESULT part=round ms={round_ms:.3f} epoch_ms={epoch_ms:.3f} "
          f"ratio={round_ms / epoch_ms:.2f} plan={args.plan} free_replays={args.free_replays}")
    for name, times in spent.items():
        print(f"RESULT part={name} ms={sum(times) / args.rounds * 1e3:.3f} "
              f"calls={len(times) / args.rounds:g}")


if __name__ == "__main__":
    main()
