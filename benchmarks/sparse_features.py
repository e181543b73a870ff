"""Time federated rounds with dense and with sparse CSR node features (``model.sparse_features``).

Bag-of-words features are mostly zeros, so the first layer's sparse product does a small
fraction of the dense one's work. Each case runs its rounds twice, dense then sparse, and
reports the median fit and evaluation time of a round and the final pooled test accuracy,
which must agree (the same model up to float summation order; no dropout, whose draws differ
in number between the layouts).

    GRAPHFED_DATA=../shared/datasets python benchmarks/sparse_features.py [--rounds N]
        [--cases NAME,...]
"""

from __future__ import annotations

import argparse
import statistics
import time

from round_time import case_names

from graphfed.config import load_config
from graphfed.experiment import build_federation

PHYSICS = ["dataset=Coauthor-Physics", "partition=fedspray_published", "num_clients=12",
           "model=gcn", "model.dropout=0", "local_epochs=5", "device=cpu"]
CASES = {
    "fedspray-gcn-physics12": ["algorithm=fedspray", *PHYSICS],
    "fedavg-gcn-physics12": ["algorithm=fedavg", *PHYSICS],
    "fedavg-gcn-cora-louvain10": ["dataset=Cora", "algorithm=fedavg", "model=gcn",
                                  "model.dropout=0", "partition=louvain", "num_clients=10",
                                  "local_epochs=5", "device=cpu"],
}


def timed_rounds(overrides: list[str], rounds: int) -> tuple[float, float, float]:
    """Median fit and evaluation seconds of a round, and the last round's pooled accuracy."""
    fed = build_federation(load_config(None, overrides), 0)
    fed.setup()
    fits, evals, accuracy = [], [], float("nan")
    for rnd in range(1, rounds + 1):
        start = time.perf_counter()
        fed.fit_round(rnd)
        fits.append(time.perf_counter() - start)
        start = time.perf_counter()
        accuracy = fed.evaluate(rnd)["test_acc_pooled"]
        evals.append(time.perf_counter() - start)
    return statistics.median(fits), statistics.median(evals), accuracy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", type=case_names(CASES), default=list(CASES))
    args = parser.parse_args()
    print("| case | dense round (s) | sparse round (s) | speed-up | dense eval (s) | "
          "sparse eval (s) | accuracy dense / sparse |")
    print("|---|---|---|---|---|---|---|")
    for name in args.cases:
        dense = timed_rounds([*CASES[name], "model.sparse_features=false"], args.rounds)
        sparse = timed_rounds([*CASES[name], "model.sparse_features=true"], args.rounds)
        print(f"| {name} | {dense[0]:.2f} | {sparse[0]:.2f} | {dense[0] / sparse[0]:.1f}x | "
              f"{dense[1]:.3f} | {sparse[1]:.3f} | {dense[2]:.4f} / {sparse[2]:.4f} |")


if __name__ == "__main__":
    main()
