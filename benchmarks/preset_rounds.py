"""Time a reproduction preset's cells on this machine: per method the setup exchange, a fit round
(mean of a few) and one evaluation, and the hours a full cell would take at that pace — to plan
which presets fit a CPU and which need a GPU.

    GRAPHFED_DATA=../shared/datasets python benchmarks/preset_rounds.py fedego-table2-3 \
        --dataset Cora [--methods fedavg,fedego] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time

from graphfed.config import with_overrides
from graphfed.experiment import build_federation
from graphfed.reproduce.catalog import get_preset
from graphfed.reproduce.plan import cell_config, select


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset")
    parser.add_argument("--dataset", default="Cora")
    parser.add_argument("--methods", default=None, help="comma-separated (default: all)")
    parser.add_argument("--rounds", type=int, default=3, help="fit rounds to average")
    parser.add_argument("--device", default="cpu")
    options = parser.parse_args()
    preset = get_preset(options.preset)
    methods = options.methods.split(",") if options.methods else None
    variants, _ = select(preset, methods, [options.dataset])
    print("| method | setup (s) | fit round (s) | evaluation (s) | full cell (h) |")
    print("|---|---|---|---|---|")
    for variant in variants:
        if variant.algorithm is None:
            continue
        config = cell_config(preset, variant, options.dataset, [0], quick=False)
        config = with_overrides(config, {"device": options.device, "checkpoint_every": 0})
        fed = build_federation(config, seed=0)
        start = time.perf_counter()
        fed.setup()
        setup = time.perf_counter() - start
        for rnd in range(1, options.rounds + 1):
            fed.fit_round(rnd)
        fit = (time.perf_counter() - start - setup) / options.rounds
        start = time.perf_counter()
        fed.evaluate(options.rounds)
        evaluation = time.perf_counter() - start
        evaluations = config.rounds // config.eval_every
        hours = (setup + config.rounds * fit + evaluations * evaluation) / 3600
        print(f"| {variant.method} | {setup:.1f} | {fit:.2f} | {evaluation:.2f} | {hours:.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
