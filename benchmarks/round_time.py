"""Time one federated round against the same work done as one centralized epoch.

The centralized reference trains one model for one epoch over the union of the clients'
training data (same graphs, same batch size): the practical lower bound for a round. Rounds and
epochs alternate, and each side's median is reported, so that a slow spell of the machine
weighs on both. Evaluation is excluded from the round time and reported separately.

    GRAPHFED_DATA=../shared/datasets python benchmarks/round_time.py [--repeats N] [--device cuda]
        [--engine sequential|batched] [--cases NAME,...] [--set KEY=VALUE ...]
        [--default-allocator]

On a GPU the round includes moving every message between the clients' device and the
server's (the CPU), which the centralized epoch does not pay.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Mapping

import torch
from torch_geometric.data import Batch

from graphfed.allocator import keep_freed_memory
from graphfed.config import load_config
from graphfed.data.federated import SPLITS, GraphClient, NodeClient
from graphfed.experiment import Federation, build_federation
from graphfed.training import prepare_client

CASES = {
    "fedavg-gcn-cora-louvain10": [
        "dataset=Cora", "algorithm=fedavg", "model=gcn", "model.hidden=64", "model.layers=2",
        "partition=louvain", "num_clients=10", "local_epochs=1"],
    # the same on CSR features (model.sparse_features, as configs/quickstart.yaml takes them)
    "fedavg-gcn-cora-louvain10-csr": [
        "dataset=Cora", "algorithm=fedavg", "model=gcn", "model.hidden=64", "model.layers=2",
        "partition=louvain", "num_clients=10", "local_epochs=1", "model.sparse_features=true"],
    "fedavg-gin-proteins10": [
        "dataset=PROTEINS", "algorithm=fedavg", "model=gin", "model.hidden=64", "model.layers=3",
        "partition=dirichlet", "num_clients=10", "local_epochs=1", "batch_size=128",
        "optimizer.lr=0.001"],
    # each client its own model: evaluation runs the padded, vmapped layout (engine=batched)
    "local-gin-proteins10": [
        "dataset=PROTEINS", "algorithm=local", "model=gin", "model.hidden=64", "model.layers=3",
        "partition=dirichlet", "num_clients=10", "local_epochs=1", "batch_size=128",
        "optimizer.lr=0.001"],
    # FairGFL's setting: 40 small overlapping clients (about 66 nodes each) and a wide first
    # layer (1,433 x 256), so the clients' weights, more than their graphs, are the work
    "fedavg-gcn-cora-overlap40": [
        "dataset=Cora", "algorithm=fedavg", "model=gcn", "model.hidden=256", "model.layers=2",
        "partition=fairgfl_overlap", "num_clients=40", "local_epochs=1", "optimizer.name=sgd",
        "optimizer.lr=0.5"],
    # synthetic (CSBM, 100k nodes, 64 features), many small clients: the per-client overhead
    "fedavg-gcn-csbm100k-100": [
        "dataset=csbm", "csbm.nodes=100000", "algorithm=fedavg", "model=gcn", "model.hidden=64",
        "model.layers=2", "partition=metis", "num_clients=100", "local_epochs=1"],
    # Cora's round in miniature (1,000 nodes, 8 features and hidden units, 10 clients): the
    # arithmetic is next to nothing, so the times are the host's, Python and dispatch, which
    # is what bounds a round of small clients on a GPU
    "fedavg-gcn-csbm1k-10-host": [
        "dataset=csbm", "csbm.nodes=1000", "csbm.features=8", "algorithm=fedavg", "model=gcn",
        "model.hidden=8", "model.layers=2", "partition=metis", "num_clients=10",
        "local_epochs=1"],
}


def case_names(known: Mapping[str, object]) -> Callable[[str], list[str]]:
    """An argparse type for ``--cases``: names from ``known`` only, so that a typo is one
    line and exit code 2, not a traceback after minutes of other cases."""

    def parse(text: str) -> list[str]:
        names = text.split(",")
        unknown = [name for name in names if name not in known]
        if unknown:
            raise argparse.ArgumentTypeError(
                f"unknown case {', '.join(unknown)}; known: {', '.join(known)}")
        return names

    return parse


def union_client(clients: list) -> NodeClient | GraphClient:
    """All clients' data as one client: node level as a block-diagonal union of the subgraphs."""
    if isinstance(clients[0], NodeClient):
        graph = Batch.from_data_list([c.graph for c in clients])
        return NodeClient(graph, torch.cat([c.global_ids for c in clients]))
    return GraphClient({s: [g for c in clients for g in c.graphs[s]] for s in SPLITS},
                       {s: torch.cat([c.global_ids[s] for c in clients]) for s in SPLITS})


def central_epoch(fed: Federation) -> Callable[[], object]:
    """One epoch of the federation's model over the union of its clients' training data, on
    its device, from its initial parameters: the practical lower bound a round is timed
    against."""
    config = fed.config
    central = prepare_client(union_client(fed.data.clients), fed.trainer.model,
                             torch.device(config.device))
    params = fed.trainer.initial_params()
    return lambda: fed.trainer.train(params, central, 1, config.batch_size)


def timed(fn, repeats: int, device: str) -> float:
    """Median wall time of ``fn``; on a GPU, after its queued kernels have finished."""
    return statistics.median(_times([fn], repeats, device)[0])


def _times(fns: list, repeats: int, device: str) -> list[list[float]]:
    """Wall times of each of ``fns``, called in turn ``repeats`` times: interleaved, so that a
    slow spell of a shared machine slows both sides of a ratio alike."""
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times, strict=True):
            sync()
            start = time.perf_counter()
            fn()
            sync()
            out.append(time.perf_counter() - start)
    return times


def bench(name: str, overrides: list[str], repeats: int, device: str, engine: str,
          extra: list[str]) -> str:
    config = load_config(None, [*overrides, *extra, "checkpoint_every=0", f"device={device}",
                                f"engine={engine}"])
    fed = build_federation(config, seed=0)
    epoch = central_epoch(fed)
    rounds = iter(range(1, 10_000))
    for _ in range(2):  # warm-up
        fed.fit_round(next(rounds))
        epoch()
    round_s, central_s = (statistics.median(t) for t in _times(
        [lambda: fed.fit_round(next(rounds)), epoch], repeats, device))
    eval_s = timed(lambda: fed.evaluate(0), repeats, device)
    return (f"RESULT case={name} engine={engine} round_s={round_s:.5f} central_s={central_s:.5f} "
            f"ratio={round_s / central_s:.3f} eval_s={eval_s:.5f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--engine", choices=("sequential", "batched"), default="sequential")
    parser.add_argument("--cases", type=case_names(CASES), default=list(CASES),
                        help="comma-separated case names")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a config override added to every case (repeatable)")
    parser.add_argument("--default-allocator", action="store_true",
                        help="leave glibc's allocator thresholds as they are (the graphfed "
                        "command raises them: graphfed.allocator)")
    args = parser.parse_args()
    kept = not args.default_allocator and keep_freed_memory()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, device {args.device}, "
          f"freed memory kept: {kept}")
    for name in args.cases:
        print(bench(name, CASES[name], args.repeats, args.device, args.engine, args.set),
              flush=True)


if __name__ == "__main__":
    main()
