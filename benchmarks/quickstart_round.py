"""The quickstart round: ``configs/quickstart.yaml`` at one local epoch with evaluation every
round (issue 20's per-round overhead case), timed as a loop of ``fit_round`` then a loop of
``evaluate`` after three warm-up rounds:

    GRAPHFED_DATA=../shared/datasets python benchmarks/quickstart_round.py [--rounds 40]
        [--engine sequential|batched]

ends with ``RESULT case=quickstart engine=... fit_ms=... eval_ms=... round_ms=...`` (means).
"""

from __future__ import annotations

import argparse
import time

from graphfed.config import load_config
from graphfed.experiment import build_federation


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--engine", choices=("sequential", "batched"), default="sequential")
    args = parser.parse_args()
    config = load_config("configs/quickstart.yaml", [
        "local_epochs=1", "eval_every=1", "checkpoint_every=0", f"engine={args.engine}"])
    fed = build_federation(config, seed=0)
    fed.setup()
    for rnd in range(1, 4):
        fed.fit_round(rnd)
        fed.evaluate(rnd)
    rounds = range(4, 4 + args.rounds)
    start = time.perf_counter()
    for rnd in rounds:
        fed.fit_round(rnd)
    fit_ms = (time.perf_counter() - start) / args.rounds * 1000
    start = time.perf_counter()
    for rnd in rounds:
        fed.evaluate(rnd)
    eval_ms = (time.perf_counter() - start) / args.rounds * 1000
    print(f"RESULT case=quickstart engine={args.engine} fit_ms={fit_ms:.1f} "
          f"eval_ms={eval_ms:.1f} round_ms={fit_ms + eval_ms:.1f}")


if __name__ == "__main__":
    main()
