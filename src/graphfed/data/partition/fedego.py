"""FedEgo's two node-level simulations, which choose the global test graph and every client's
local test nodes themselves (not by a per-client ratio):

* label skew: a random global test fraction; each client then draws 3 major labels, takes a fixed
  number of pool nodes (80 % from its major labels), keeps the nodes with an edge inside its own
  set, and holds out its last ``test_num`` (shuffled) nodes as local test, which later clients can
  no longer draw. Training nodes of different clients may overlap.
* Louvain: communities chopped and dealt round-robin into N+1 parts of similar size; part 0 is
  the global test graph, parts 1..N the clients, each client's last ``test_num`` nodes its test.

In both, a client's ``⌊n/5⌋`` nodes before its test nodes are validation (the paper's 20 %; the
code leaves them out of training and uploads at those positions).
"""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from graphfed.data.partition.node import louvain_communities
from graphfed.data.partition.plan import TEST, TRAIN, VAL, SplitPlan
from graphfed.errors import GraphfedError


def _neighbour_sets(graph: Data) -> list[set[int]]:
    edges = to_undirected(graph.edge_index, num_nodes=graph.num_nodes)
    neighbours: list[set[int]] = [set() for _ in range(graph.num_nodes)]
    for u, v in edges.t().tolist():
        if u != v:
            neighbours[u].add(v)
    return neighbours


def _code_splits(ids: np.ndarray, test_num: int, val_fraction: float) -> torch.Tensor:
    """The last ``test_num`` nodes test; the ``⌊n · val_fraction⌋`` before them validation
    (FedEgo's paper: 20 % validation; its code never trains on or uploads them); the rest
    train."""
    n = len(ids)
    val = int(n * val_fraction)
    if n - test_num - val < 1:
        raise GraphfedError(
            f"a client holds {n} nodes, too few for its {test_num} local test nodes and {val} "
            f"validation nodes; lower partition.test_num or raise partition.client_size")
    splits = torch.full((n,), TRAIN, dtype=torch.long)
    splits[n - test_num - val:n - test_num] = VAL
    splits[n - test_num:] = TEST
    return splits


def label_skew_plan(graph: Data, num_clients: int, global_fraction: float, client_fraction: float,
                    num_major: int, major_fraction: float, test_num: int,
                    val_fraction: float, rng: np.random.Generator) -> SplitPlan:
    """FedEgo's label-skew split (its code's ``split_mode='label'``), in the graph's node ids."""
    neighbours = _neighbour_sets(graph)
    connected = np.array([v for v in range(graph.num_nodes) if neighbours[v]])
    y = graph.y.cpu().numpy()
    classes = np.unique(y[connected])
    if num_major > len(classes):
        raise GraphfedError(f"partition: {num_major} major labels but only {len(classes)} classes")
    n = len(connected)
    order = rng.permutation(connected)
    global_test = np.sort(order[:int(n * global_fraction)])
    taken = np.zeros(graph.num_nodes, dtype=bool)  # global test and earlier clients' local tests
    taken[global_test] = True
    size = int(n * client_fraction)
    client_ids, client_splits = [], []
    for _ in range(num_clients):
        pool = connected[~taken[connected]]
        majors = rng.permutation(classes)[:num_major]
        major_pool = pool[np.isin(y[pool], majors)]
        n_major = min(int(size * major_fraction), len(major_pool))
        major = rng.permutation(major_pool)[:n_major]
        rest = pool[~np.isin(pool, major)]
        chosen = np.concatenate([major, rng.permutation(rest)[:size - n_major]])
        inside = set(chosen.tolist())
        kept = np.array([v for v in chosen if neighbours[v] & inside], dtype=np.int64)
        kept = rng.permutation(kept)
        splits = _code_splits(kept, test_num, val_fraction)
        taken[kept[len(kept) - test_num:]] = True
        client_ids.append(torch.as_tensor(kept, dtype=torch.long))
        client_splits.append(splits)
    return SplitPlan(torch.as_tensor(global_test, dtype=torch.long), client_ids, client_splits)


def community_parts(communities: list[list[int]], num_parts: int, num_nodes: int,
                    delta: int) -> list[list[int]]:
    """Chop communities above ``num_nodes // num_parts - delta`` nodes, sort them by size and deal
    them round-robin, skipping parts that would exceed ``num_nodes // num_parts + delta``."""
    chunk = num_nodes // num_parts - delta
    capacity = num_nodes // num_parts + delta
    if chunk < 1:
        raise GraphfedError(f"partition: {num_nodes} nodes are too few for {num_parts} parts")
    pieces = [c[i:i + chunk] for c in communities for i in range(0, len(c), chunk)]
    pieces.sort(key=len, reverse=True)
    parts: list[list[int]] = [[] for _ in range(num_parts)]
    k = 0
    for piece in pieces:
        for _ in range(num_parts):
            if len(parts[k]) + len(piece) <= capacity:
                break
            k = (k + 1) % num_parts
        else:
            k = min(range(num_parts), key=lambda j: len(parts[j]))  # nothing fits: the smallest
        parts[k].extend(piece)
        k = (k + 1) % num_parts
    return parts


def code_edge_relabel(edge_index: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """The renumbering FedEgo's data loader applies to the edges: nodes in order of first
    appearance along the edge list (source, then target), nodes without edges last.

    Its Louvain path splits a graph whose *edges* carry these ids while features and labels keep
    the dataset's order (the edge array is renumbered in place through a NumPy view of the
    tensor), so a node's label no longer matches its place in the structure."""
    sequence = edge_index.t().reshape(-1).numpy()
    nodes, first = np.unique(sequence, return_index=True)
    relabel = np.full(num_nodes, -1, dtype=np.int64)
    relabel[nodes[np.argsort(first)]] = np.arange(len(nodes))
    unseen = relabel < 0
    relabel[unseen] = np.arange(len(nodes), num_nodes)
    return torch.from_numpy(relabel)


def renumbered_graph(graph: Data, relabel: torch.Tensor) -> Data:
    """``graph`` with its edges renumbered by ``relabel`` and its features and labels left in
    place: the graph FedEgo's code hands to its Louvain splitter."""
    return Data(x=graph.x, y=graph.y, edge_index=relabel[graph.edge_index],
                num_nodes=graph.num_nodes)


def louvain_plan(graph: Data, num_clients: int, test_num: int, val_fraction: float, seed: int,
                 delta: int = 20, code_misalignment: bool = False) -> SplitPlan:
    """FedEgo's community split (its code's ``split_mode='louvain'``): part 0 is the global test
    graph, parts 1..N the clients; each client's last ``test_num`` nodes (node order) test, the
    validation fifth before them. ``code_misalignment`` splits the graph its code actually split
    (``code_edge_relabel``), for comparison with the paper's Tables 4-5."""
    relabel = None
    if code_misalignment:
        relabel = code_edge_relabel(graph.edge_index, graph.num_nodes)
        graph = renumbered_graph(graph, relabel)
    communities = louvain_communities(graph, seed)
    parts = community_parts(communities, num_clients + 1, graph.num_nodes, delta)
    ids = [np.sort(np.array(p, dtype=np.int64)) for p in parts]
    return SplitPlan(torch.as_tensor(ids[0], dtype=torch.long),
                     [torch.as_tensor(p, dtype=torch.long) for p in ids[1:]],
                     [_code_splits(p, test_num, val_fraction) for p in ids[1:]], relabel)
