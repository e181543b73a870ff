"""Scale: FedAvg + GCN on the synthetic CSBM graph with many Metis clients.

Builds ``dataset=csbm`` with N nodes, cuts it into K clients with Metis, and reports the set-up
time (generation, partition, the clients' preparation), one training round (1 local epoch,
full batch per client) against one centralized epoch over the union of the clients' training
data, one evaluation, and the process's peak memory (resident set; on CUDA also the device's
peak allocation):

    python benchmarks/scale.py --nodes 1000000 --clients 1000 [--rounds R] [--device cuda]
        [--engine sequential|batched]

ends with ``RESULT case=csbm-<N>-<K> setup_s=... round_s=... central_s=... ratio=... eval_s=...
peak_gb=...`` (a round: the median of R after one warm-up round; the centralized epoch: the
median of R).
"""

from __future__ import annotations

import argparse
import resource
import time

import torch
from round_time import timed, union_client

from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.training import prepare_client


def peak_gb() -> float:
    """The process's peak resident set (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--clients", type=int, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--engine", choices=("sequential", "batched"), default="sequential")
    args = parser.parse_args()
    config = load_config(None, [
        "dataset=csbm", f"csbm.nodes={args.nodes}", "algorithm=fedavg", "model=gcn",
        "model.hidden=64", "model.layers=2", "partition=metis", f"num_clients={args.clients}",
        "local_epochs=1", "checkpoint_every=0", f"device={args.device}",
        f"engine={args.engine}"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, "
          f"engine {args.engine}", flush=True)
    start = time.perf_counter()
    fed = build_federation(config, seed=0)
    fed.setup()
    setup_s = time.perf_counter() - start
    print(f"set-up {setup_s:.1f} s, peak {peak_gb():.2f} GB", flush=True)

    central = prepare_client(union_client(fed.data.clients), fed.trainer.model,
                             torch.device(args.device))
    params = fed.trainer.initial_params()
    rounds = iter(range(1, 1_000_000))
    fed.fit_round(next(rounds))  # warm-up
    round_s = timed(lambda: fed.fit_round(next(rounds)), args.rounds, args.device)
    central_s = timed(lambda: fed.trainer.train(params, central, 1, None), args.rounds,
                      args.device)
    eval_s = timed(lambda: fed.evaluate(0), 1, args.device)
    gpu = (f" gpu_peak_gb={torch.cuda.max_memory_allocated() / 2**30:.2f}"
           if args.device == "cuda" else "")
    print(f"RESULT case=csbm-{args.nodes}-{args.clients} setup_s={setup_s:.1f} "
          f"round_s={round_s:.4f} central_s={central_s:.4f} ratio={round_s / central_s:.3f} "
          f"eval_s={eval_s:.4f} peak_gb={peak_gb():.2f}{gpu}")


if __name__ == "__main__":
    main()
