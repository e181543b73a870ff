"""FED-PUB's subgraph protocol (Baek et al., ICML 2023; its ``data/generators``): the largest
connected component, one random 20/40/40 train/test/validation draw over its nodes, then METIS
parts as clients.

- **disjoint**: METIS into K parts, each a client holding its induced subgraph (edges across
  clients are lost).
- **overlapping**: METIS into K/5 communities; each community gives five clients, each a
  random half of the community's nodes drawn on its own, so clients of one community share
  nodes.

A node's split is decided once for the whole graph, before the cut, as the authors' generator
does, so a client's shares are 20/40/40 only in expectation, and a node two overlapping clients
share is a training node (or a test node) for both. There is no global test set: FED-PUB scores
each client on its own test nodes.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse
import torch
from torch_geometric.data import Data

from graphfed.data.adjacency import undirected_csr
from graphfed.data.partition.node import metis_split
from graphfed.data.partition.overlap_ratios import true_overlap
from graphfed.data.partition.plan import TEST, TRAIN, VAL, SplitPlan
from graphfed.errors import GraphfedError

CLIENTS_PER_COMMUNITY = 5  # overlapping.py's n_clien_per_comm


def largest_component(graph: Data) -> torch.Tensor:
    """The node ids of the largest connected component (edges read as undirected), ascending:
    the authors' ``LargestConnectedComponents`` transform keeps only these."""
    count, component = scipy.sparse.csgraph.connected_components(
        undirected_csr(graph.edge_index, graph.num_nodes), directed=False)
    largest = np.bincount(component, minlength=count).argmax()
    return torch.from_numpy(np.flatnonzero(component == largest))


def split_codes(num_nodes: int, train: float, rng: np.random.Generator) -> torch.Tensor:
    """One random split of ``num_nodes``: the first round(train·n) of a permutation train, the
    next round((1 - train)/2·n) test, the rest validation (``split_train``'s order)."""
    order = torch.from_numpy(rng.permutation(num_nodes))
    n_train = round(num_nodes * train)
    n_test = round(num_nodes * (1 - train) / 2)
    codes = torch.full((num_nodes,), VAL, dtype=torch.long)
    codes[order[:n_train]] = TRAIN
    codes[order[n_train:n_train + n_test]] = TEST
    return codes


def fedpub_plan(graph: Data, num_clients: int, train: float, overlapping: bool, seed: int,
                rng: np.random.Generator, roles_kept: bool = True) -> SplitPlan:
    """The clients of FED-PUB's disjoint or overlapping split (module docstring), in ids of
    ``graph``; nodes outside its largest component belong to no client. ``roles_kept=False``:
    the drawn roles are replaced afterwards (a published split, which checks its own), so a
    client the draw leaves without a training node is no error; the draw still runs, so the
    clients are those of the same seed without the replacement."""
    if overlapping and num_clients % CLIENTS_PER_COMMUNITY:
        raise GraphfedError(f"fedpub_overlapping makes {CLIENTS_PER_COMMUNITY} clients per "
                            f"METIS community: num_clients must be a multiple of "
                            f"{CLIENTS_PER_COMMUNITY}, got {num_clients}")
    keep = largest_component(graph)
    sub = Data(edge_index=_induced_edges(graph.edge_index, keep, graph.num_nodes),
               num_nodes=len(keep))
    codes = split_codes(len(keep), train, rng)
    parts = num_clients // CLIENTS_PER_COMMUNITY if overlapping else num_clients
    communities = metis_split(sub, parts, seed)
    if overlapping:
        local = [torch.sort(c[torch.from_numpy(rng.permutation(len(c))[:len(c) // 2])]).values
                 for c in communities for _ in range(CLIENTS_PER_COMMUNITY)]
    else:
        local = communities
    if roles_kept and any(int((codes[ids] == TRAIN).sum()) == 0 for ids in local):
        raise GraphfedError("fedpub partition: a client got no training node; use fewer "
                            "clients or a larger train share")
    client_ids = [keep[ids] for ids in local]
    return SplitPlan(torch.empty(0, dtype=torch.long), client_ids, [codes[ids] for ids in local],
                     overlap=(true_overlap(graph.edge_index, graph.num_nodes, client_ids)
                              if overlapping else None))


def _induced_edges(edge_index: torch.Tensor, keep: torch.Tensor, num_nodes: int) -> torch.Tensor:
    """The edges among ``keep``, renumbered to positions in ``keep``."""
    position = torch.full((num_nodes,), -1, dtype=torch.long)
    position[keep] = torch.arange(len(keep))
    mapped = position[edge_index]
    return mapped[:, (mapped >= 0).all(0)]
