"""METIS's own working memory on a CSBM graph: the graph is generated and its CSR adjacency
built, everything else freed, then ``pymetis.part_graph`` runs alone; the peak resident set
minus the resident set before it is METIS's (a lower bound: memory it frees before its peak
is not counted), per adjacency entry:

    python benchmarks/metis_memory.py --nodes 1000000 --clients 1000 [--iterations 1]

ends with ``RESULT case=metis-<N>-<K> seconds=... metis_gb=... bytes_per_entry=...``.
"""

from __future__ import annotations

import argparse
import gc
import resource
import time

import pymetis

from graphfed.data.partition.node import metis_adjacency
from graphfed.data.synthetic import CSBMOptions, contextual_sbm


def resident_gb() -> float:
    with open("/proc/self/status") as status:
        line = next(entry for entry in status if entry.startswith("VmRSS"))
    return int(line.split()[1]) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--clients", type=int, required=True)
    parser.add_argument("--iterations", type=int, default=1, help="METIS niter")
    parser.add_argument("--recursive", action="store_true",
                        help="METIS's recursive bisection instead of its k-way scheme")
    args = parser.parse_args()
    graph = contextual_sbm(CSBMOptions(nodes=args.nodes))
    starts, neighbours = metis_adjacency(graph.edge_index, args.nodes)
    del graph
    gc.collect()
    before = resident_gb()
    start = time.perf_counter()
    pymetis.part_graph(args.clients, pymetis.CSRAdjacency(adj_starts=starts,
                                                          adjacent=neighbours),
                       options=pymetis.Options(seed=0, niter=args.iterations),
                       recursive=args.recursive)
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    metis = max(0.0, peak - before)  # 0 if generation's own peak was higher (then run larger)
    scheme = "-recursive" if args.recursive else ""
    print(f"RESULT case=metis-{args.nodes}-{args.clients}{scheme} seconds={seconds:.1f} "
          f"metis_gb={metis:.2f} bytes_per_entry={metis * 2**30 / len(neighbours):.0f}")


if __name__ == "__main__":
    main()
