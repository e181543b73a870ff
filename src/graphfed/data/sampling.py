"""Neighbourhood sampling of a client graph: a few neighbours per node and hop, drawn uniformly
with replacement (PyG's ``NeighborLoader(replace=True, directed=True)``, which FedEgo's code uses
for every method), either as fixed-shape ego-trees (FedEgo) or as a small subgraph that any
message-passing model reads in place of the whole graph.

Sampling is written with tensor ops so it needs neither pyg-lib nor torch-sparse.
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import BaseModel, Field, PositiveInt
from torch import Tensor
from torch_geometric.utils import to_undirected

from graphfed.validation import OPTIONS

WHOLE_GRAPH_WEIGHTS = ("weights edges by whole-graph degrees (GCN normalisation), which a "
                       "sampled neighbourhood does not have; use a model that reads plain edges "
                       "(sage, gat, mlp, mlp_sage) or leave sampling.fanouts unset")


class SamplingOptions(BaseModel):
    """How node-level clients cut their training (and optionally evaluation) nodes into
    mini-batches; the defaults are plain full-graph mini-batches."""

    model_config = OPTIONS

    fanouts: list[PositiveInt] | None = Field(
        None, min_length=1, description="neighbours drawn (with replacement) per node at each "
        "hop, hop 1 first: a mini-batch is its nodes' sampled neighbourhood, not the whole "
        "graph (FedEgo's code: [6, 6]); none: the whole client graph")
    train_fraction: float = Field(
        1.0, gt=0.0, le=1.0, description="each local epoch trains on a fresh random subset of "
        "the training nodes, this fraction of the client's node count (FedEgo's code: 0.2)")
    evaluate: Literal["full", "sampled"] = Field(
        "full", description="score nodes on their whole "
        "neighbourhood (full) or on sampled ones like training (sampled, FedEgo's code; needs "
        "fanouts)")


class NeighbourSampler:
    """Draws neighbours of a graph's nodes from its (undirected) CSR adjacency."""

    def __init__(self, edge_index: Tensor, num_nodes: int):
        edges = to_undirected(edge_index, num_nodes=num_nodes)
        order = torch.argsort(edges[1] * num_nodes + edges[0])
        self.sources = edges[0, order]
        self.degree = torch.bincount(edges[1], minlength=num_nodes)
        self.start = torch.cumsum(self.degree, 0) - self.degree
        self.num_nodes = num_nodes

    def draw(self, parents: Tensor, fanout: int, generator: torch.Generator | None = None
             ) -> Tensor:
        """``fanout`` neighbours of every parent, shape (*parents.shape, fanout); an isolated
        node stands in for its own neighbours."""
        degree = self.degree[parents].unsqueeze(-1)
        draw = torch.rand(*parents.shape, fanout, generator=generator, device=parents.device)
        slot = self.start[parents].unsqueeze(-1) + (draw * degree).long()
        has = (degree > 0).expand_as(slot)
        neighbours = parents.unsqueeze(-1).expand_as(slot).clone()
        neighbours[has] = self.sources[slot[has]]
        return neighbours

    def sample(self, centres: Tensor, hops: int = 2, fanout: int = 6,
               generator: torch.Generator | None = None) -> Tensor:
        """Fixed-shape ego-trees: node ids of shape (len(centres), tree_size), position 0 the
        centre and the children of position p at ``fanout * p + 1 ... fanout * p + fanout``."""
        levels = [centres.view(-1, 1)]
        for _ in range(hops):
            levels.append(self.draw(levels[-1], fanout, generator).reshape(len(centres), -1))
        return torch.cat(levels, dim=1)

    def subgraph(self, centres: Tensor, fanouts: list[int]) -> tuple[Tensor, Tensor]:
        """The sampled neighbourhood of distinct ``centres`` as a subgraph: its nodes' ids (the
        centres first, in order) and its edges, relabelled, from each sampled neighbour to the
        node that drew it. As in PyG's sampler a node is expanded once, at the first hop it is
        reached, and an isolated node draws nothing."""
        local = torch.full((self.num_nodes,), -1, dtype=torch.long, device=centres.device)
        local[centres] = torch.arange(len(centres), device=centres.device)
        nodes, frontier, sources, targets = [centres], centres, [], []
        count = len(centres)
        for fanout in fanouts:
            drawn = self.draw(frontier, fanout)
            parent = frontier.unsqueeze(-1).expand_as(drawn)
            has = (self.degree[frontier] > 0).unsqueeze(-1).expand_as(drawn)
            drawn, parent = drawn[has], parent[has]
            frontier = torch.unique(drawn[local[drawn] < 0])
            local[frontier] = torch.arange(count, count + len(frontier), device=centres.device)
            count += len(frontier)
            nodes.append(frontier)
            sources.append(local[drawn])
            targets.append(local[parent])
        return torch.cat(nodes), torch.stack([torch.cat(sources), torch.cat(targets)])
