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
from torch_geometric.utils import to_undirected


def tree_size(hops: int, fanout: int) -> int:
    return sum(fanout**h for h in range(hops + 1))


def tree_edges(hops: int, fanout: int) -> Tensor:
    """The template's child -> parent edges, shape (2, tree_size - 1)."""
    children = torch.arange(1, tree_size(hops, fanout))
    return torch.stack([children, (children - 1) // fanout])


def batched_tree_edges(num_trees: int, hops: int, fanout: int, device=None) -> Tensor:
    """The template repeated for ``num_trees`` trees laid out one after another."""
    template = tree_edges(hops, fanout).to(device)
    offsets = torch.arange(num_trees, device=device).repeat_interleave(template.size(1))
    return template.repeat(1, num_trees) + offsets * tree_size(hops, fanout)


class NeighbourSampler:
    """Samples fixed-shape ego-graphs of one graph: ``fanout`` neighbours per node and hop, drawn
    uniformly with replacement (FedEgo's sampler), as node ids at each tree position."""

    def __init__(self, edge_index: Tensor, num_nodes: int, hops: int = 2, fanout: int = 6):
        edges = to_undirected(edge_index, num_nodes=num_nodes)
        order = torch.argsort(edges[1] * num_nodes + edges[0])
        self.sources = edges[0, order]
        self.degree = torch.bincount(edges[1], minlength=num_nodes)
        self.start = torch.cumsum(self.degree, 0) - self.degree
        self.hops, self.fanout = hops, fanout
        self.num_nodes = num_nodes

    def sample(self, centres: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Node ids of shape (len(centres), tree_size); isolated nodes take themselves as
        neighbours (FedEgo's splits drop them, so this only matters for evaluation graphs)."""
        levels = [centres.view(-1, 1)]
        for _ in range(self.hops):
            parents = levels[-1]
            degree = self.degree[parents].unsqueeze(-1)
            draw = torch.rand(*parents.shape, self.fanout, generator=generator,
                              device=parents.device)
            slot = self.start[parents].unsqueeze(-1) + (draw * degree).long()
            has = degree > 0
            neighbours = parents.unsqueeze(-1).expand_as(slot).clone()
            neighbours[has.expand_as(slot)] = self.sources[slot[has.expand_as(slot)]]
            levels.append(neighbours.reshape(len(centres), -1))
        return torch.cat(levels, dim=1)


def mash(values: Tensor) -> Tensor:
    """FedEgo's Mixup of aligned ego-graphs: the mean over the batch at every position.

    ``values`` has shape (batch, tree_size, d); the result (tree_size, d)."""
    return values.mean(dim=0)


class PersonalLayers(nn.Module):
    """FedEgo's personalisation layers Φ: ``layers`` SAGE layers and a bias-free classifier.

    ``linear`` drops the activation between the SAGE layers (FedEgo-Linear, Theorem 4.1); the
    activation after the last one stays, as in FedEgo's code. Input is either a graph (node
    features + edges) or a batch of ego-trees (trees, tree_size, h), for which only the
    positions that reach the centre are computed: one level less per layer."""

    def __init__(self, hidden: int, num_classes: int, layers: int = 2, dropout: float = 0.5,
                 linear: bool = False, fanout: int = 6):
        super().__init__()
        self.convs = nn.ModuleList(SAGEConv(hidden, hidden) for _ in range(layers))
        self.classifier = nn.Linear(hidden, num_classes, bias=False)
        self.dropout, self.linear, self.fanout = dropout, linear, fanout

    def _activate(self, h: Tensor, i: int) -> Tensor:
        return F.relu(h) if not self.linear or i == len(self.convs) - 1 else h

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
            levels = [self._activate(conv.lin_l(child.reshape(*node.shape[:2], f, -1).mean(2))
                                     + conv.lin_r(node), i)
                      for node, child in pairwise(levels)]
        return levels[0][:, 0]

    def forward(self, h: Tensor, edge_index: Tensor | None = None,
                edge_weight: Tensor | None = None) -> Tensor:
        if h.dim() == 3:
            h = self._trees(h)
        else:
            for i, conv in enumerate(self.convs):
                h = self._activate(conv(h, edge_index), i)
        return self.classifier(F.dropout(h, self.dropout, self.training))


class FedEgoNet(nn.Module):
    """Reduction layers Θ (a linear map + ReLU, shared by FedAvg) and personalisation layers Φ.

    ``forward(x, edge_index)`` runs on a whole client graph (full-neighbourhood evaluation);
    with ``positions`` (trees, tree_size) it reads ego-trees whose position p holds node
    ``positions[:, p]`` of ``x``, so each distinct node is reduced once."""

    def __init__(self, in_dim: int, hidden: int, num_classes: int, dropout: float = 0.5,
                 linear: bool = False, fanout: int = 6):
        super().__init__()
        self.reduction = nn.Linear(in_dim, hidden)
        self.personal = PersonalLayers(hidden, num_classes, dropout=dropout, linear=linear,
                                       fanout=fanout)
        self.dropout = dropout
        for module in self.modules():  # FedEgo's code: Kaiming-normal weight matrices
            if isinstance(module, nn.Linear):
                nn.init.kaiming_normal_(module.weight)

    def prepare(self, graph):
        return graph

    def reduce(self, x: Tensor) -> Tensor:
        return F.relu(self.reduction(x))

    def forward(self, x: Tensor, edge_index: Tensor | None = None,
                edge_weight: Tensor | None = None, positions: Tensor | None = None) -> Tensor:
        h = self.reduce(x)
        if positions is not None:
            h = h[positions]
        return self.personal(F.dropout(h, self.dropout, self.training), edge_index)
