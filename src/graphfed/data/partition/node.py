"""Node-level federated simulations: which nodes of one big graph each client holds."""

from __future__ import annotations

import networkx as nx
import numpy as np
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from graphfed.errors import GraphfedError


def _undirected_networkx(graph: Data) -> nx.Graph:
    g = nx.Graph()
    g.add_nodes_from(range(graph.num_nodes))
    edges = graph.edge_index.t().tolist()
    g.add_edges_from((u, v) for u, v in edges if u != v)
    return g


def louvain_communities(graph: Data, seed: int, resolution: float = 1.0) -> list[list[int]]:
    """Louvain communities (Blondel et al. 2008), largest first, deterministic for a seed."""
    communities = nx.community.louvain_communities(
        _undirected_networkx(graph), resolution=resolution, seed=seed)
    return sorted((sorted(c) for c in communities), key=lambda c: (-len(c), c[0]))


def louvain_split(graph: Data, num_clients: int, mode: str, seed: int,
                  resolution: float = 1.0) -> list[torch.Tensor]:
    """Clients from Louvain communities.

    ``largest``: the K largest communities, one per client; other nodes are left out (FedSpray).
    ``pack``: every community goes to the client with the fewest nodes so far, largest community
    first, giving K clients of similar size (FedSage / OpenFGL style).
    """
    communities = louvain_communities(graph, seed, resolution)
    if len(communities) < num_clients:
        raise GraphfedError(
            f"louvain partition: {num_clients} clients but only {len(communities)} communities "
            f"were found; use fewer clients, a higher resolution, or partition=metis")
    if mode == "largest":
        parts = communities[:num_clients]
    else:
        parts = [[] for _ in range(num_clients)]
        for community in communities:
            smallest = min(range(num_clients), key=lambda k: (len(parts[k]), k))
            parts[smallest].extend(community)
    return [torch.tensor(sorted(p), dtype=torch.long) for p in parts]


def metis_split(graph: Data, num_clients: int, seed: int) -> list[torch.Tensor]:
    """Balanced min-cut parts from METIS (through pymetis)."""
    import pymetis

    edge_index = to_undirected(graph.edge_index, num_nodes=graph.num_nodes)
    edge_index = edge_index[:, edge_index[0] != edge_index[1]]
    order = torch.argsort(edge_index[0] * graph.num_nodes + edge_index[1])
    src, dst = edge_index[0, order], edge_index[1, order]
    xadj = torch.zeros(graph.num_nodes + 1, dtype=torch.long)
    xadj[1:] = torch.cumsum(torch.bincount(src, minlength=graph.num_nodes), 0)
    options = pymetis.Options()
    options.seed = seed
    adjacency = pymetis.CSRAdjacency(adj_starts=xadj.tolist(), adjacent=dst.tolist())
    _, membership = pymetis.part_graph(num_clients, adjacency, options=options)
    membership = torch.tensor(membership, dtype=torch.long)
    parts = [torch.nonzero(membership == k).view(-1) for k in range(num_clients)]
    if any(len(p) == 0 for p in parts):
        raise GraphfedError(f"metis partition: some of the {num_clients} parts are empty")
    return parts


def major_labels_split(labels: torch.Tensor, num_clients: int, num_major: int,
                       major_fraction: float, client_size: int, rng: np.random.Generator,
                       overlap: bool = False) -> list[torch.Tensor]:
    """FedEgo's label skew: each client draws ``num_major`` labels and takes ``client_size`` nodes,
    a ``major_fraction`` share of them from its major labels and the rest from the other labels.

    Without ``overlap`` the nodes a client takes leave the pool, so clients are disjoint.
    """
    y = labels.cpu().numpy()
    classes = np.unique(y)
    if num_major > len(classes):
        raise GraphfedError(
            f"major_labels partition: {num_major} major labels but the dataset has "
            f"{len(classes)} classes")
    pool = np.ones(len(y), dtype=bool)
    parts = []
    for k in range(num_clients):
        majors = rng.choice(classes, num_major, replace=False)
        is_major = np.isin(y, majors)
        major_pool = np.nonzero(pool & is_major)[0]
        minor_pool = np.nonzero(pool & ~is_major)[0]
        n_major = min(round(client_size * major_fraction), len(major_pool))
        n_minor = min(client_size - n_major, len(minor_pool))
        chosen = np.concatenate([rng.choice(major_pool, n_major, replace=False),
                                 rng.choice(minor_pool, n_minor, replace=False)])
        if len(chosen) == 0:
            raise GraphfedError(
                f"major_labels partition: no nodes left for client {k}; lower client_size")
        if not overlap:
            pool[chosen] = False
        parts.append(torch.tensor(np.sort(chosen), dtype=torch.long))
    return parts
