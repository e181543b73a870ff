"""GPFL's fixed batch of Erdős–Rényi graphs, on which every client model's outputs form its
functional embedding (paper §3.2 "Client network update"; spec §3.3 and §7.2.1).

The code builds the batch from ``erdos_renyi_graph(30, 0.1, seed=0)`` called R times with the
same seed, so its "20 random graphs" are one graph (47 edges, largest degree 8) repeated
(``gpfl/initial_graph.py:random_graphbatch``). Node features are a one-hot "degree" clipped to
d_x - 1, so the graphs fit the model's input layer (``onehotdegree_data``). The code counts it
on an adjacency matrix holding each networkx edge (u, v) once, at row u; networkx lists an edge
from its lower-numbered end, so a node's feature is its number of higher-numbered neighbours,
not its degree (``degree="code"``, the default; ``"full"``: the degree).
"""

from __future__ import annotations

import networkx as nx
import torch
from torch_geometric.data import Data

from graphfed.algorithms.gpfl.options import DegreeFeature

NODES = 30
EDGE_PROBABILITY = 0.1


def erdos_renyi(seed: int, feature_dim: int, degree: DegreeFeature = "code") -> Data:
    """G(30, 0.1) drawn by networkx with ``seed``, undirected, one-hot clipped degrees."""
    graph = nx.erdos_renyi_graph(NODES, EDGE_PROBABILITY, seed=seed, directed=False)
    edges = torch.tensor(list(graph.edges()), dtype=torch.long).reshape(-1, 2).t()
    edge_index = torch.cat([edges, edges.flip(0)], dim=1)
    counted = edges[0] if degree == "code" else edge_index[0]
    counts = torch.bincount(counted, minlength=NODES).clamp_max(feature_dim - 1)
    x = torch.nn.functional.one_hot(counts, feature_dim).float()
    return Data(x=x, edge_index=edge_index, y=torch.zeros(1, dtype=torch.long), num_nodes=NODES)


def random_graph_batch(count: int, feature_dim: int, distinct: bool,
                       degree: DegreeFeature = "code") -> list[Data]:
    """``count`` graphs: the seed-0 graph repeated (the code), or seeds 0 .. count-1."""
    if distinct:
        return [erdos_renyi(seed, feature_dim, degree) for seed in range(count)]
    return [erdos_renyi(0, feature_dim, degree)] * count
