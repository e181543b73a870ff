"""Where a batched round's host time goes, on the host-bound case of ``round_time.py``
(``fedavg-gcn-csbm1k-10-host``: Cora's round in miniature, whose arithmetic is next to
nothing, so its time is the host's, as on a GPU with small clients):

    GRAPHFED_DATA=../shared/datasets OMP_NUM_THREADS=1 python benchmarks/host_round.py
        [--rounds 300] [--plan cpu|accelerator]

prints ``RESULT part=round ms=...`` (the median round) and one ``RESULT part=... ms=...`` line
a timed part (its mean time a round; parts nest: ``stacked_forward`` holds ``weighted_sum`` and
``dropout``, ``deliver_fit`` holds ``train_together``). To time older code, copy this file and
``round_time.py`` into its checkout's ``benchmarks/`` and run it there with ``PYTHONPATH=src``.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import time

from round_time import CASES

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--plan", choices=("cpu", "accelerator"), default="accelerator",
                        help="the batched engine's layout: this CPU's, or a GPU's")
    args = parser.parse_args()
    from graphfed.models import gnn
    from graphfed.runtime import base, simulation
    from graphfed.training import batched, plans

    if args.plan == "accelerator":
        plans.for_device = lambda device: plans.ACCELERATOR_PLAN
    spent: dict[str, list[float]] = collections.defaultdict(list)
    for module, name in ((simulation, "train_together"), (batched, "stacked_forward"),
                         (gnn, "weighted_sum"), (gnn, "dropout"), (base, "finite_messages"),
                         (base, "check_message")):
        setattr(module, name, timing(spent, name, getattr(module, name)))
    config = load_config(None, [*CASES[CASE], "checkpoint_every=0", "device=cpu",
                                "engine=batched"])
    fed = build_federation(config, seed=0)
    runtime = fed.runtime
    for name in ("_steps", "deliver_fit"):
        setattr(runtime, name, timing(spent, name, getattr(runtime, name)))
    for rnd in (1, 2, 3):  # warm-up: caches built once per run are not a round's work
        fed.fit_round(rnd)
    spent.clear()
    rounds = []
    for rnd in range(4, 4 + args.rounds):
        start = time.perf_counter()
        fed.fit_round(rnd)
        rounds.append(time.perf_counter() - start)
    print(f"RESULT part=round ms={statistics.median(rounds) * 1e3:.3f} plan={args.plan}")
    for name, times in spent.items():
        print(f"RESULT part={name} ms={sum(times) / args.rounds * 1e3:.3f} "
              f"calls={len(times) / args.rounds:g}")


if __name__ == "__main__":
    main()
