"""Scale: FedAvg + GCN on the synthetic CSBM graph with many Metis clients.

Builds ``dataset=csbm`` with N nodes, cuts it into K clients with Metis, and reports the set-up
time (generation, partition, the clients' preparation), one training round (1 local epoch,
full batch per client) against one centralized epoch over the union of the clients' training
data, one evaluation, and the process's peak memory (resident set; on CUDA also the device's
peak allocation):

    python benchmarks/scale.py --nodes 1000000 --clients 1000 [--rounds R] [--device cuda]
        [--engine sequential|batched] [--metis-iterations I] [--default-allocator]

ends with ``RESULT case=csbm-<N>-<K> setup_s=... round_s=... central_s=... ratio=... eval_s=...
peak_gb=... generate_s=... partition_s=...`` (a round: the median of R after one warm-up round;
the centralized epoch: the median of R, summed over its pieces; set-up: generation, partition
and the federation's set-up, with a fresh partition cache). ``--trace FILE`` samples the
resident set every 0.2 s, from another process, into a CSV (seconds, GB, phase; METIS's own
call a phase of its own) and prints each phase's peak.
"""

from __future__ import annotations

import argparse
import bisect
import os
import resource
import subprocess
import sys
import tempfile
import time
from functools import partial

import torch
from round_time import timed, union_client

from graphfed.allocator import keep_freed_memory
from graphfed.build import config_dataset
from graphfed.config import load_config
from graphfed.data.federated import load_or_build_partition
from graphfed.experiment import build_federation
from graphfed.training import prepare_client

PIECE_NODES = 1_000_000  # the largest centralized full-batch epoch this machine holds


def peak_gb() -> float:
    """The process's peak resident set (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


SAMPLER = """
import sys, time
pid, path, interval = sys.argv[1], sys.argv[2], float(sys.argv[3])
with open(path, "w") as out:
    while True:
        try:
            with open(f"/proc/{pid}/status") as status:
                line = next(entry for entry in status if entry.startswith("VmRSS"))
        except (FileNotFoundError, StopIteration):
            break
        out.write(f"{time.time()},{int(line.split()[1]) / 2**20}\\n")
        out.flush()
        time.sleep(interval)
"""


class MemoryTrace:
    """The resident set sampled from another process (METIS holds the GIL, so a thread here
    would see nothing while it runs), each sample tagged with the phase running then. A
    sampler misses peaks shorter than its interval: read small runs' phase peaks as lower
    bounds."""

    def __init__(self, path: str, interval: float = 0.2) -> None:
        self.path = path
        self.phases: list[tuple[float, str]] = [(time.time(), "start")]
        self.metis_entries = 0
        self._raw = path + ".raw"
        self._sampler = subprocess.Popen(
            [sys.executable, "-c", SAMPLER, str(os.getpid()), self._raw, str(interval)])

    def enter(self, phase: str) -> None:
        """Tag the samples from now on with ``phase``."""
        self.phases.append((time.time(), phase))

    def finish(self) -> None:
        self._sampler.terminate()
        self._sampler.wait()
        starts = [t for t, _ in self.phases]
        peaks: dict[str, float] = {}
        before_metis: float | None = None  # the last sample before METIS's call
        previous = 0.0
        with open(self._raw) as raw, open(self.path, "w") as out:
            out.write("seconds,resident_gb,phase\n")
            for line in raw:
                t, gb = map(float, line.split(","))
                phase = self.phases[max(0, bisect.bisect_right(starts, t) - 1)][1]
                peaks[phase] = max(peaks.get(phase, 0.0), gb)
                if phase == "metis" and before_metis is None:
                    before_metis = previous
                previous = gb
                out.write(f"{t - starts[0]:.2f},{gb:.3f},{phase}\n")
        os.remove(self._raw)
        print("phase peaks (GB): " + ", ".join(f"{p} {gb:.2f}" for p, gb in peaks.items()))
        if self.metis_entries and before_metis is not None:
            metis = peaks["metis"] - before_metis
            print(f"METIS: {metis:.2f} GB over what the process held before it, "
                  f"{metis * 2**30 / self.metis_entries:.0f} bytes per adjacency entry "
                  f"({self.metis_entries} entries)")


def trace_metis(trace: MemoryTrace) -> None:
    """Tag METIS's own call as the phase ``metis``, the partition's other work ``partition``."""
    import pymetis

    part_graph = pymetis.part_graph

    def traced(num_parts, adjacency, **kwargs):
        trace.metis_entries = len(adjacency.adjacent)
        trace.enter("metis")
        try:
            return part_graph(num_parts, adjacency, **kwargs)
        finally:
            trace.enter("partition")

    pymetis.part_graph = traced


def mark(trace: MemoryTrace | None, phase: str) -> None:
    if trace:
        trace.enter(phase)


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
    parser.add_argument("--trace", help="write the resident set over time to this CSV")
    parser.add_argument("--default-allocator", action="store_true",
                        help="leave glibc's allocator thresholds as they are (the graphfed "
                        "command raises them: graphfed.allocator)")
    args = parser.parse_args()
    kept = not args.default_allocator and keep_freed_memory()
    trace = MemoryTrace(args.trace) if args.trace else None
    if trace:
        trace_metis(trace)
    config = load_config(None, [
        "dataset=csbm", f"csbm.nodes={args.nodes}", "algorithm=fedavg", "model=gcn",
        "model.hidden=64", "model.layers=2", "partition=metis",
        f"partition.refine_iterations={args.metis_iterations}", f"num_clients={args.clients}",
        "local_epochs=1", "checkpoint_every=0", f"device={args.device}",
        f"engine={args.engine}"])
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, "
          f"engine {args.engine}, freed memory kept: {kept}", flush=True)
    with tempfile.TemporaryDirectory() as cache:  # a partition built here, not read back
        os.environ["GRAPHFED_CACHE"] = cache
        start = time.perf_counter()
        mark(trace, "generation")
        data = config_dataset(config)
        generate_s = time.perf_counter() - start
        print(f"generation {generate_s:.1f} s, peak {peak_gb():.2f} GB", flush=True)
        mark(trace, "partition")
        load_or_build_partition(data, config.partition, config.num_clients, 0,
                                config.dataset_options)
        partition_s = time.perf_counter() - start - generate_s
        print(f"partition {partition_s:.1f} s, peak {peak_gb():.2f} GB", flush=True)
        mark(trace, "setup")
        fed = build_federation(config, seed=0)  # the graph and the partition built above
        fed.setup()
        setup_s = time.perf_counter() - start
    print(f"set-up {setup_s:.1f} s in all, peak {peak_gb():.2f} GB", flush=True)

    # A full-batch epoch over ten million nodes needs about 2.8 KB of activations and
    # gradients per node (measured at one million): more than this machine has. Past a million
    # nodes the centralized epoch runs over the union in pieces of about a million nodes, one
    # after another: the same arithmetic, plus an optimizer step per piece over the model's
    # few thousand parameters. Each piece is built, timed and dropped before the next, so at
    # most one piece's copy of the data is held beside the clients'.
    params = fed.trainer.initial_params()
    rounds = iter(range(1, 1_000_000))
    mark(trace, "rounds")
    fed.fit_round(next(rounds))  # warm-up
    round_s = timed(lambda: fed.fit_round(next(rounds)), args.rounds, args.device)
    mark(trace, "centralized")
    clients = fed.data.clients
    step = -(-len(clients) // max(1, round(args.nodes / PIECE_NODES)))
    central_s = 0.0
    for i in range(0, len(clients), step):
        piece = prepare_client(union_client(clients[i:i + step]), fed.trainer.model,
                               torch.device(args.device))
        central_s += timed(partial(fed.trainer.train, params, piece, 1, None), args.rounds,
                           args.device)
        del piece
    mark(trace, "evaluation")
    eval_s = timed(lambda: fed.evaluate(0), 1, args.device)
    gpu = (f" gpu_peak_gb={torch.cuda.max_memory_allocated() / 2**30:.2f}"
           if args.device == "cuda" else "")
    print(f"RESULT case=csbm-{args.nodes}-{args.clients} setup_s={setup_s:.1f} "
          f"round_s={round_s:.4f} central_s={central_s:.4f} ratio={round_s / central_s:.3f} "
          f"eval_s={eval_s:.4f} peak_gb={peak_gb():.2f}{gpu} generate_s={generate_s:.1f} "
          f"partition_s={partition_s:.1f}")
    if trace:
        trace.finish()


if __name__ == "__main__":
    main()
