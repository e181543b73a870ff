"""Node-level federated simulations: which nodes of one big graph each client holds."""

from __future__ import annotations

import networkx as nx
import numpy as np
import torch
from torch_geometric.data import Data

from graphfed.data.adjacency import undirected_csr
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


def metis_adjacency(edge_index: torch.Tensor, num_nodes: int) -> tuple[np.ndarray, np.ndarray]:
    """The symmetric adjacency without self-loops, in the CSR form METIS reads, as the int64
    arrays METIS takes without a copy."""
    adjacency = undirected_csr(edge_index, num_nodes)
    return adjacency.indptr.astype(np.int64), adjacency.indices.astype(np.int64)


def metis_split(graph: Data, num_clients: int, seed: int,
                refine_iterations: int = 10) -> list[torch.Tensor]:
    """Balanced min-cut parts from METIS (through pymetis).

    The parts are read off one sort of the membership, so a ten-million-node graph costs
    METIS's own memory and time, not Python lists of its edges. ``refine_iterations`` is
    METIS's ``niter`` (its default 10): most of METIS's time on a large graph, and 1 gives a
    cut a few percent larger in a third of the time.
    """
    import pymetis

    xadj, adjacent = metis_adjacency(graph.edge_index, graph.num_nodes)
    adjacency = pymetis.CSRAdjacency(adj_starts=xadj, adjacent=adjacent)
    options = pymetis.Options(seed=seed, niter=refine_iterations)
    _, membership = pymetis.part_graph(num_clients, adjacency, options=options)
    del xadj, adjacent, adjacency
    membership = torch.from_numpy(np.frombuffer(membership, dtype=np.int64).copy())
    sizes = torch.bincount(membership, minlength=num_clients)
    if bool((sizes == 0).any()):
        raise GraphfedError(f"metis partition: some of the {num_clients} parts are empty")
    return list(torch.sort(membership, stable=True).indices.split(sizes.tolist()))


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
