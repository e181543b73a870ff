"""Fixed-shape ego-graphs (FedEgo) and the network that reads them.

An ego-graph of ``hops`` hops and ``fanout`` neighbours per node is a complete tree with a fixed
layout: position 0 is the centre, and the children of position p are ``fanout * p + 1 ...
fanout * p + fanout``. Because every ego-graph has the same layout, the ego-graphs of a batch are
aligned position by position, which is what FedEgo's Mixup averages over. Edges point from child to
parent, so two SAGE layers carry a hop-2 leaf's features to the centre.
"""

from __future__ import annotations

from itertools import pairwise

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv
from torch_geometric.utils import scatter


def tree_size(hops: int, fanout: int) -> int:
    return sum(fanout**h for h in range(hops + 1))


def tree_edges(hops: int, fanout: int) -> Tensor:
    """The template's child -> parent edges, shape (2, tree_size - 1)."""
    children = torch.arange(1, tree_size(hops, fanout))
    return torch.stack([children, (children - 1) // fanout])


def mash(values: Tensor) -> Tensor:
    """FedEgo's Mixup of aligned ego-graphs: the mean over the batch at every position.

    ``values`` has shape (batch, tree_size, d); the result (tree_size, d)."""
    return values.mean(dim=0)


class TreeSAGE(nn.Module):
    """SAGE layers over a graph (node features + edges) or over a batch of ego-trees (trees,
    tree_size, d), for which only the positions that reach the centre are computed — one level
    less per layer — and the centres' outputs (trees, d_out) are returned.

    ``shared=False``: PyG ``SAGEConv`` (mean of neighbours through ``lin_l`` with a bias, root
    through ``lin_r``), as FedEgo's code; ``shared=True``: one bias-free W for both,
    W (h_v + mean_u h_u), as the paper's Eq. 9 writes it. ``linear`` drops the activation
    between layers (FedEgo-Linear, Theorem 4.1); ``last_activation`` keeps the one after the
    last layer (FedEgo's code) or drops it too (the paper's linear layers)."""

    def __init__(self, dims: list[int], linear: bool = False, fanout: int = 6,
                 shared: bool = False, last_activation: bool = True):
        super().__init__()
        self.convs = nn.ModuleList(nn.Linear(a, b, bias=False) if shared else SAGEConv(a, b)
                                   for a, b in pairwise(dims))
        self.linear, self.fanout = linear, fanout
        self.shared, self.last_activation = shared, last_activation

    def _activate(self, h: Tensor, i: int) -> Tensor:
        last = i == len(self.convs) - 1
        return F.relu(h) if not self.linear or (last and self.last_activation) else h

    def _combine(self, conv: nn.Module, node: Tensor, neighbours: Tensor) -> Tensor:
        """One layer from a node's features and its neighbours' mean."""
        if self.shared:
            return conv(node + neighbours)
        return conv.lin_l(neighbours) + conv.lin_r(node)

    def _trees(self, h: Tensor) -> Tensor:
        f = self.fanout
        levels, start = [], 0
        while start < h.shape[1]:
            width = f ** len(levels)
            levels.append(h[:, start:start + width])
            start += width
        if len(levels) != len(self.convs) + 1:
            raise ValueError(f"{len(levels) - 1}-hop trees need {len(levels) - 1} SAGE layers, "
                             f"not {len(self.convs)}")
        for i, conv in enumerate(self.convs):
            levels = [self._activate(self._combine(
                conv, node, child.reshape(*node.shape[:2], f, -1).mean(2)), i)
                for node, child in pairwise(levels)]
        return levels[0][:, 0]

    def _layer(self, conv: nn.Module, h: Tensor, edge_index: Tensor) -> Tensor:
        if not self.shared:
            return conv(h, edge_index)
        src, dst = edge_index
        return self._combine(conv, h, scatter(h[src], dst, 0, h.shape[0], reduce="mean"))

    def embed(self, h: Tensor, edge_index: Tensor | None = None) -> Tensor:
        if h.dim() == 3:
            return self._trees(h)
        for i, conv in enumerate(self.convs):
            h = self._activate(self._layer(conv, h, edge_index), i)
        return h

    def forward(self, h: Tensor, edge_index: Tensor | None = None) -> Tensor:
        return self.embed(h, edge_index)


class PersonalLayers(TreeSAGE):
    """FedEgo's personalisation layers Φ: ``layers`` SAGE layers and a bias-free classifier."""

    def __init__(self, hidden: int, num_classes: int, layers: int = 2, dropout: float = 0.5,
                 linear: bool = False, fanout: int = 6, shared: bool = False,
                 last_activation: bool = True):
        super().__init__([hidden] * (layers + 1), linear, fanout, shared, last_activation)
        self.classifier = nn.Linear(hidden, num_classes, bias=False)
        self.dropout = dropout

    def forward(self, h: Tensor, edge_index: Tensor | None = None,
                edge_weight: Tensor | None = None) -> Tensor:
        return self.classifier(F.dropout(self.embed(h, edge_index), self.dropout, self.training))


class PersonalMLP(nn.Module):
    """Φ of FedEgo w/o EGO: a hidden layer and a bias-free classifier on (already aggregated)
    node embeddings; uploads of shape (trees, 1, h) are read at their single position."""

    def __init__(self, hidden: int, num_classes: int, dropout: float = 0.5):
        super().__init__()
        self.hidden = nn.Linear(hidden, hidden)
        self.classifier = nn.Linear(hidden, num_classes, bias=False)
        self.dropout = dropout

    def forward(self, h: Tensor, edge_index: Tensor | None = None,
                edge_weight: Tensor | None = None) -> Tensor:
        if h.dim() == 3:
            h = h[:, 0]
        h = F.relu(self.hidden(h))
        return self.classifier(F.dropout(h, self.dropout, self.training))


class FedEgoNet(nn.Module):
    """Reduction layers Θ (shared by FedAvg) and personalisation layers Φ.

    FedEgo: Θ is a linear map + ReLU applied to every node, Φ SAGE layers on the ego-trees of
    reduced embeddings. ``ego=False`` (FedEgo w/o EGO): Θ is the SAGE stack on the raw ego-trees
    and Φ an MLP on the centres' embeddings. ``forward(x, edge_index)`` runs on a whole client
    graph (full-neighbourhood evaluation); with ``positions`` (trees, tree_size) it reads
    ego-trees whose position p holds node ``positions[:, p]`` of ``x``."""

    def __init__(self, in_dim: int, hidden: int, num_classes: int, dropout: float = 0.5,
                 linear: bool = False, fanout: int = 6, ego: bool = True,
                 shared: bool = False, last_activation: bool = True):
        super().__init__()
        self.ego = ego
        if ego:
            self.reduction: nn.Module = nn.Linear(in_dim, hidden)
            self.personal: nn.Module = PersonalLayers(hidden, num_classes, dropout=dropout,
                                                      linear=linear, fanout=fanout,
                                                      shared=shared,
                                                      last_activation=last_activation)
        else:
            self.reduction = TreeSAGE([in_dim, hidden, hidden], linear, fanout, shared,
                                      last_activation)
            self.personal = PersonalMLP(hidden, num_classes, dropout)
        self.dropout = dropout
        for module in self.modules():  # FedEgo's code: Kaiming-normal weight matrices
            if isinstance(module, nn.Linear):
                nn.init.kaiming_normal_(module.weight)

    def prepare(self, graph):
        return graph

    def forward(self, x: Tensor, edge_index: Tensor | None = None,
                edge_weight: Tensor | None = None, positions: Tensor | None = None) -> Tensor:
        if not self.ego:
            h = self.reduction(x if positions is None else x[positions], edge_index)
        else:
            h = F.relu(self.reduction(x))
            if positions is not None:
                # h[positions] would sum the gradient of a node's repeated positions with
                # atomic float adds on several CPU threads (index_put_ with accumulate), in an
                # order that changes between runs; embedding's backward adds them in index order
                h = F.embedding(positions, h)
        return self.personal(F.dropout(h, self.dropout, self.training), edge_index)

