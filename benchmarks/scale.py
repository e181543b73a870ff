"""Scale: FedAvg + GCN on the synthetic CSBM graph with many Metis clients.

Builds ``dataset=csbm`` with N nodes, cuts it into K clients with Metis, and reports the set-up
time (generation, partition, the clients' preparation), one training round (1 local epoch,
full batch per client) against one centralized epoch over the union of the clients' training
data, one evaluation, and the process's peak memory (resident set; on CUDA also the device's
peak allocation):

    python benchmarks/scale.py --nodes 1000000 --clients 1000 [--rounds R] [--device cuda]
        [--engine sequential|batched] [--metis-iterations I]

ends with ``RESULT case=csbm-<N>-<K> setup_s=... round_s=... central_s=... ratio=... eval_s=...
peak_gb=... generate_s=... partition_s=...`` (a round: the median of R after one warm-up round;
the centralized epoch: the median of R; set-up: generation, partition and the federation's set-up,
with a fresh partition cache).
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

import torch
from round_time import timed, union_client

from graphfed.build import config_dataset
from graphfed.config import load_config
from graphfed.data.federated import load_or_build_partition
from graphfed.experiment import build_federation
from graphfed.training import prepare_client

PIECE_NODES = 1_000_000  # the largest centralized full-batch epoch this machine holds


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
    parser.add_argument("--metis-iterations", type=int, default=1,
                        help="METIS refinement passes (partition.refine_iterations; its "
                             "default is 10, about three times slower on a million nodes)")
    args = parser.parse_args()
    config = load_config(None, [
        "dataset=csbm", f"csbm.nodes={args.nodes}", "algorithm=fedavg", "model=gcn",
        "model.hidden=64", "model.layers=2", "partition=metis",
        f"partition.refine_iterations={args.metis_iterations}", f"num_clients={args.clients}",
        "local_epochs=1", "checkpoint_every=0", f"device={args.device}",
        f"engine={args.engine}"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, "
          f"engine {args.engine}", flush=True)
    with tempfile.TemporaryDirectory() as cache:  # a partition built here, not read back
        os.environ["GRAPHFED_CACHE"] = cache
        start = time.perf_counter()
        data = config_dataset(config)
        generate_s = time.perf_counter() - start
        print(f"generation {generate_s:.1f} s, peak {peak_gb():.2f} GB", flush=True)
        load_or_build_partition(data, config.partition, config.num_clients, 0,
                                config.dataset_options)
        partition_s = time.perf_counter() - start - generate_s
        print(f"partition {partition_s:.1f} s, peak {peak_gb():.2f} GB", flush=True)
        fed = build_federation(config, seed=0)  # the graph and the partition built above
        fed.setup()
        setup_s = time.perf_counter() - start
    print(f"set-up {setup_s:.1f} s in all, peak {peak_gb():.2f} GB", flush=True)

    # A full-batch epoch over ten million nodes needs about 2.8 KB of activations and
    # gradients per node (measured at one million): more than this machine has. Past a million
    # nodes the centralized epoch runs over the union in pieces of about a million nodes, one
    # after another: the same arithmetic, plus an optimizer step per piece over the model's
    # few thousand parameters.
    clients = fed.data.clients
    step = -(-len(clients) // max(1, round(args.nodes / PIECE_NODES)))
    central = [prepare_client(union_client(clients[i:i + step]), fed.trainer.model,
                              torch.device(args.device)) for i in range(0, len(clients), step)]
    params = fed.trainer.initial_params()
    rounds = iter(range(1, 1_000_000))
    fed.fit_round(next(rounds))  # warm-up
    round_s = timed(lambda: fed.fit_round(next(rounds)), args.rounds, args.device)
    central_s = timed(lambda: [fed.trainer.train(params, c, 1, None) for c in central],
                      args.rounds, args.device)
    eval_s = timed(lambda: fed.evaluate(0), 1, args.device)
    gpu = (f" gpu_peak_gb={torch.cuda.max_memory_allocated() / 2**30:.2f}"
           if args.device == "cuda" else "")
    print(f"RESULT case=csbm-{args.nodes}-{args.clients} setup_s={setup_s:.1f} "
          f"round_s={round_s:.4f} central_s={central_s:.4f} ratio={round_s / central_s:.3f} "
          f"eval_s={eval_s:.4f} peak_gb={peak_gb():.2f}{gpu} generate_s={generate_s:.1f} "
          f"partition_s={partition_s:.1f}")


if __name__ == "__main__":
    main()
