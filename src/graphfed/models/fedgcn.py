"""FedGCN's network (Yao et al., NeurIPS 2023): a 2-layer GCN on features pre-aggregated over
``hops`` neighbour means, D^-1 (A + I) X per hop."""

from __future__ import annotations

import torch
from torch import Tensor

from graphfed.models.gnn import ModelOptions, NodeClassifier


def neighbour_sums(x: Tensor, edge_index: Tensor, num_nodes: int) -> tuple[Tensor, Tensor]:
    """Per node: the sum of its in-neighbours' features and their number (self excluded)."""
    source, target = edge_index
    sums = torch.zeros(num_nodes, x.size(1), dtype=x.dtype, device=x.device)
    sums.index_add_(0, target, x[source])
    counts = torch.zeros(num_nodes, dtype=x.dtype, device=x.device)
    counts.index_add_(0, target, torch.ones_like(target, dtype=x.dtype))
    return sums, counts


def neighbour_mean(x: Tensor, edge_index: Tensor, num_nodes: int) -> Tensor:
    """D^-1 (A + I) x: each node's mean over itself and its in-neighbours."""
    sums, counts = neighbour_sums(x, edge_index, num_nodes)
    return (x + sums) / (1 + counts).unsqueeze(1)


class FedGCNNet(NodeClassifier):
    """A 2-layer GCN whose inputs are ``hops`` neighbour means of the raw features."""

    def __init__(self, in_dim: int, num_classes: int, opts: ModelOptions, hops: int):
        super().__init__(in_dim, num_classes, opts.model_copy(update={"name": "gcn", "layers": 2}))
        self.hops = hops

    def prepare(self, graph):
        out = super().prepare(graph)
        x = graph.x
        for _ in range(self.hops):
            x = neighbour_mean(x, graph.edge_index, graph.num_nodes)
        out.x = x
        return out
