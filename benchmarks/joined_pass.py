"""The joined layout's passes (graph level, CPU): what a pass costs against a plain one over
the same rows, and what the pass budget (``stacked_losses.PASS_ROWS``) does to a round.

    GRAPHFED_DATA=../shared/datasets OMP_NUM_THREADS=1 python benchmarks/joined_pass.py \
        [--repeats N] [--budgets 1024,2048,4096,8192,1000000]

On the PROTEINS case of ``round_time.py`` (10 Dirichlet clients, GIN, batch 128, dropout 0.5):
- ``RESULT part=pass``: one forward and backward pass over clients 1-4's first batches, joined
  (each client's own parameters) against a plain pass of one model over the same rows;
- ``RESULT part=ten_clients``: all ten clients' first batches in one pass against the same
  clients in passes of the default budget;
- ``RESULT part=round budget=B``: a batched round with that pass budget over a centralized epoch,
  rounds and epochs alternating (medians).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from round_time import CASES, central_epoch
from torch.func import functional_call

from graphfed.allocator import keep_freed_memory
from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.training import stacked_losses
from graphfed.training.joined import join_graph_batches


def median_ms(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--budgets", default="1024,2048,4096,8192,1000000")
    args = parser.parse_args()
    keep_freed_memory()
    config = load_config(None, [*CASES["fedavg-gin-proteins10"], "checkpoint_every=0",
                                "device=cpu", "engine=batched"])
    fed = build_federation(config, seed=0)
    model, clients = fed.trainer.model, [ctx.data for ctx in fed.runtime.contexts]
    generator = torch.Generator().manual_seed(0)
    first = [next(iter(c.batches("train", config.batch_size, True, generator))) for c in clients]
    start = fed.trainer.initial_params()
    live = {n: v.expand(len(first), *v.shape).clone().requires_grad_(True)
            for n, v in start.items()}
    one = {n: v.clone().requires_grad_(True) for n, v in start.items()}
    keys = torch.arange(len(first), dtype=torch.int32)
    model.train()

    def joined(a: int, b: int) -> None:
        loss, _ = stacked_losses.graph_losses(model, {n: v[a:b] for n, v in live.items()},
                                              keys[a:b], 0, first[a:b], joined=True)
        loss.sum().backward()

    def plain(a: int, b: int) -> None:
        inputs, _ = join_graph_batches(first[a:b])
        logits = functional_call(model, one, inputs)
        F.cross_entropy(logits, torch.cat([g.y for g in first[a:b]])).backward()

    def in_passes() -> None:
        rows = [len(g.x) for g in first]
        for a, b in stacked_losses.client_passes(rows, stacked_losses.PASS_ROWS):
            joined(a, b)

    rows = sum(len(g.x) for g in first[1:5])
    j, p = median_ms(lambda: joined(1, 5), args.repeats), median_ms(lambda: plain(1, 5),
                                                                      args.repeats)
    print(f"RESULT part=pass rows={rows} joined_ms={j:.2f} plain_ms={p:.2f} ratio={j / p:.3f}")
    whole = median_ms(lambda: joined(0, len(first)), args.repeats)
    passes = median_ms(in_passes, args.repeats)
    print(f"RESULT part=ten_clients rows={sum(len(g.x) for g in first)} one_pass_ms={whole:.2f} "
          f"passes_ms={passes:.2f} budget={stacked_losses.PASS_ROWS}")

    central = central_epoch(fed)
    rounds = iter(range(1, 1_000_000))
    budgets = [int(b) for b in args.budgets.split(",")]
    times: dict[int, list[float]] = {b: [] for b in budgets}
    epochs: list[float] = []
    for _ in range(2):  # warm-up
        fed.fit_round(next(rounds))
    for _ in range(args.repeats):
        for budget in budgets:
            stacked_losses.PASS_ROWS = budget
            begin = time.perf_counter()
            fed.fit_round(next(rounds))
            times[budget].append(time.perf_counter() - begin)
            begin = time.perf_counter()
            central()
            epochs.append(time.perf_counter() - begin)
    epoch = statistics.median(epochs)
    for budget in budgets:
        round_s = statistics.median(times[budget])
        print(f"RESULT part=round budget={budget} round_s={round_s:.5f} central_s={epoch:.5f} "
              f"ratio={round_s / epoch:.3f}")


if __name__ == "__main__":
    main()
