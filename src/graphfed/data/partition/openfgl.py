"""OpenFGL's subgraph-FL splits (Li et al., "OpenFGL: A Comprehensive Benchmark for Federated
Graph Learning", VLDB 2025; ``xkLi-Allen/OpenFGL``), as its code builds them.

- **louvain** (``openfgl/data/simulation.py:481-576``): Louvain communities of the whole graph
  (resolution 1); a community of more than ``N // K - δ`` nodes is cut, in node order, into runs
  of that size (:512-519); the pieces, largest first, are dealt to clients by a cursor that
  stays on one client while pieces fit (its size plus the piece below ``N // K + δ``) and moves
  on when one does not; a client the cursor finds at ``N // K`` nodes or more is closed
  (:535-567). Every node belongs to exactly one client.
- **metis** (:450-477): METIS into K parts, each a client.

Each client's nodes are then split class by class (``openfgl/task/node_cls.py:348-385``): a
class's ``n`` nodes of the client are shuffled and cut at ``⌊train·n⌋`` and ``⌊(train+val)·n⌋``
(the rest test), with OpenFGL's shares for the dataset (:218-243): 0.2/0.4/0.4 on the
homophilous sets, 0.5/0.25/0.25 on the heterophilous ones. There is no global test set: each
client is scored on its own test nodes (``openfgl/flcore/trainer.py:94-135``).

Checked against the one split OpenFGL ships, Louvain on Cora for 20 clients
(``dataset/distrib/subgraph_fl_louvain_1_Cora_client_20``): fed scikit-network's communities,
``chop`` and ``deal`` give its 20 clients node for node and in order, and ``stratified_codes``
each client's train/val/test counts.

Where graphfed differs: the communities are networkx's Louvain (seeded), not scikit-network's,
so they are OpenFGL's kind of communities, not its exact ones; METIS is seeded; and OpenFGL
builds a split once per dataset and keeps it on disk for every later run
(``openfgl/data/distributed_dataset_loader.py:80-97``), where graphfed draws it from the
partition seed (``partition.seed`` fixes it across runs).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch_geometric.data import Data

from graphfed.data.partition.node import louvain_communities
from graphfed.data.partition.plan import TEST, TRAIN, VAL, SplitPlan
from graphfed.errors import GraphfedError

DELTA = 20  # openfgl/config.py:71, louvain_delta
HOMOPHILOUS = (0.2, 0.4, 0.4)
HETEROPHILOUS = (0.5, 0.25, 0.25)
# openfgl/task/node_cls.py:234-243, in graphfed's dataset names (OpenFGL's Chameleon and
# Squirrel are the unfiltered sets graphfed does not load; their 0.48/0.32/0.20 is not for the
# filtered ones)
DEFAULT_SPLITS: dict[str, tuple[float, float, float]] = {
    **dict.fromkeys(("Cora", "CiteSeer", "PubMed", "Coauthor-CS", "Coauthor-Physics",
                     "Amazon-Photo", "Amazon-Computers"), HOMOPHILOUS),
    **dict.fromkeys(("Tolokers", "Actor", "Minesweeper"), HETEROPHILOUS),
}


def default_split(dataset: str) -> tuple[float, float, float]:
    """OpenFGL's per-client train/val/test shares for ``dataset``."""
    if dataset not in DEFAULT_SPLITS:
        raise GraphfedError(f"OpenFGL names no train/val/test shares for {dataset} (it does for "
                            f"{', '.join(DEFAULT_SPLITS)}); set partition.split")
    return DEFAULT_SPLITS[dataset]


def chop(communities: list[list[int]], size: int) -> list[list[int]]:
    """Every community (node ids ascending) cut into runs of at most ``size`` nodes, largest
    piece first; among pieces of one size, OpenFGL's order: first pieces before second ones,
    each in the order of the communities' first nodes (simulation.py:501-533: communities in
    order of first appearance, cut remainders appended, then a stable sort by size)."""
    pieces = [(i, c[0], c[i:i + size]) for c in communities for i in range(0, len(c), size)]
    pieces.sort(key=lambda p: (-len(p[2]), p[0], p[1]))
    return [p[2] for p in pieces]


def deal(pieces: list[list[int]], num_clients: int, num_nodes: int, delta: int
         ) -> list[list[int]]:
    """OpenFGL's dealing of ``pieces`` to clients (simulation.py:535-567): the cursor's client
    takes a piece while its size plus the piece stays below ``N // K + δ``; otherwise the
    cursor moves to the next open client; a client of ``N // K`` nodes or more the cursor lands
    on is closed (the last one never). When no open client can take a piece, OpenFGL's code
    means to give it to the smallest (its search loop reads the cursor's size, not each
    client's, :559-565); graphfed gives it to the smallest open client."""
    target = num_nodes // num_clients
    parts: list[list[int]] = [[] for _ in range(num_clients)]
    open_ = list(range(num_clients))
    at = 0
    for piece in pieces:
        while len(open_) > 1 and len(parts[open_[at]]) >= target:
            del open_[at]
            at %= len(open_)
        for _ in open_:
            if len(parts[open_[at]]) + len(piece) < target + delta:
                break
            at = (at + 1) % len(open_)
        else:
            at = min(range(len(open_)), key=lambda j: len(parts[open_[j]]))
        parts[open_[at]].extend(piece)
    return parts


def louvain_clients(graph: Data, num_clients: int, delta: int, resolution: float, seed: int
                    ) -> list[torch.Tensor]:
    """OpenFGL's Louvain clients (module docstring), node ids ascending."""
    size = graph.num_nodes // num_clients - delta
    if size < 1:
        raise GraphfedError(
            f"openfgl_louvain: {graph.num_nodes} nodes over {num_clients} clients leave pieces "
            f"of N // K - delta = {size} nodes; lower partition.delta or num_clients")
    communities = louvain_communities(graph, seed, resolution)
    parts = deal(chop(communities, size), num_clients, graph.num_nodes, delta)
    if any(not p for p in parts):
        raise GraphfedError(f"openfgl_louvain: {len(communities)} communities left a client "
                            f"without nodes; use fewer than {num_clients} clients")
    return [torch.tensor(sorted(p), dtype=torch.long) for p in parts]


def stratified_codes(labels: torch.Tensor, shares: tuple[float, float, float],
                     rng: np.random.Generator) -> torch.Tensor:
    """One client's split codes, class by class (node_cls.py:370-379): a class's ``n`` nodes
    shuffled, the first ``⌊train·n⌋`` train, up to ``⌊(train+val)·n⌋`` validation, the rest
    test."""
    codes = torch.full((len(labels),), TEST, dtype=torch.long)
    train, val, _ = shares
    for label in torch.unique(labels):
        members = torch.nonzero(labels == label).view(-1)
        members = members[torch.from_numpy(rng.permutation(len(members)))]
        n = len(members)
        codes[members[:int(train * n)]] = TRAIN
        codes[members[int(train * n):int((train + val) * n)]] = VAL
    return codes


def openfgl_plan(labels: torch.Tensor, clients: list[torch.Tensor],
                 shares: tuple[float, float, float], rng: np.random.Generator) -> SplitPlan:
    """``clients`` (node ids) with their per-client stratified splits; no global test set."""
    splits = [stratified_codes(labels[ids], shares, rng) for ids in clients]
    if any(not bool((s == TRAIN).any()) for s in splits):
        raise GraphfedError(f"openfgl partition: a client got no training node (none of its "
                            f"classes has {math.ceil(1 / shares[0])} nodes); use fewer clients "
                            "or a larger train share")
    return SplitPlan(torch.empty(0, dtype=torch.long), clients, splits)
