"""FedLit's multi-channel GNN (Xie, Xiong, Yang, WWW 2023): one message-passing channel per
latent link type, as in the authors' ``Oxfordblue7/FedLIT:src/models/models.py``
(``multichannel_GCN``).

A shared linear projection maps the node features to width h; its output (detached) also gives
the edge embeddings the link types are read from (``link_types``). Channel c lifts the projected
features with its own linear layer and runs ``model.layers`` message-passing layers (ReLU and
dropout after each) over the edges of type c only; the channels' outputs are summed per node and
a linear classifier reads the sum. As the code (DGL ``GraphConv`` on each type's edge-induced
subgraph), a node with no edge of type c gets nothing from channel c, and the GCN channel
normalises by the degrees within its type without self-loops; ``self_loops`` (our option) adds
them, which puts every node in every channel.

The K channels' weights are stacked along a leading dimension of size K (``lift.*``,
``convs.*``), as are the K edge prototypes (``prototypes``, K × 2h): channel c is row c of each,
so aligning two clients' channels is indexing those tensors by a permutation. The prototypes are
a parameter the forward pass reads (its E-step) but no gradient reaches: the client moves them
by its M-step between rounds.

The layer type follows ``model.name``: ``gcn`` (the code's), ``sage`` (mean aggregation with a
root weight) or ``sgc`` (no layers: the lifted features propagated ``model.sgc_hops`` times
within the type, then summed), so FedLit runs on FedSpray's three backbones.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from graphfed.models.dropout import dropout
from graphfed.models.gnn import ModelOptions
from graphfed.models.link_types import assign_link_types
from graphfed.models.propagation import weighted_sum
from graphfed.models.sparse import FeatureLinear, linear, to_csr

CHANNEL_LAYERS = ("gcn", "sage", "sgc")
PROTOTYPES = "prototypes"
CHANNEL_PREFIXES = (PROTOTYPES, "lift.", "convs.")  # parameters stacked per channel (dim 0)


def is_channel_parameter(name: str) -> bool:
    """Whether ``name`` holds one slice per link type along its first dimension."""
    return name.startswith(CHANNEL_PREFIXES)


@dataclass
class TypedEdges:
    """Every channel's edges in one graph of K × N nodes (node i of channel c is c·N + i),
    with their propagation weights, and which nodes take part in each channel (K × N)."""

    edge_index: Tensor
    weight: Tensor
    present: Tensor

    def propagate(self, z: Tensor) -> Tensor:
        """Σ_j w_ji z_j within each channel, for z of shape K × N × d."""
        k, n, d = z.shape
        return weighted_sum(z.reshape(k * n, d), self.edge_index, self.weight).view(k, n, d)


def typed_edges(edge_index: Tensor, types: Tensor, num_nodes: int, k: int, norm: str,
                self_loops: bool) -> TypedEdges:
    """The channels' edges: ``norm`` "sym" weighs an edge by D^-1/2 on both ends (GCN, degrees
    within its type, +1 with ``self_loops``, which then also links each node to itself), "mean"
    by 1/in-degree (SAGE's mean)."""
    offset = types * num_nodes
    source, target = edge_index[0] + offset, edge_index[1] + offset
    degree = torch.zeros(k * num_nodes, device=edge_index.device).index_add_(
        0, target, torch.ones_like(target, dtype=torch.float))
    present = degree.view(k, num_nodes) > 0
    if self_loops:
        present = torch.ones_like(present)
        if norm == "sym":
            loops = torch.arange(k * num_nodes, device=edge_index.device)
            source, target = torch.cat([source, loops]), torch.cat([target, loops])
            degree = degree + 1.0
    inverse_root = degree.clamp_min(1.0).rsqrt()
    if norm == "sym":
        weight = inverse_root[source] * inverse_root[target]
    else:
        weight = 1.0 / degree.clamp_min(1.0)[target]
    return TypedEdges(torch.stack([source, target]), weight, present)


class ChannelLinear(nn.Module):
    """K independent linear maps, one per channel: K × N × d_in -> K × N × d_out."""

    def __init__(self, k: int, d_in: int, d_out: int, bias: bool = True, glorot: bool = False):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(k, d_out, d_in))
        self.bias = nn.Parameter(torch.zeros(k, d_out)) if bias else None
        for w in self.weight:  # per channel as nn.Linear, or Glorot as DGL's GraphConv
            if glorot:
                nn.init.xavier_uniform_(w)
            else:
                nn.init.kaiming_uniform_(w, a=math.sqrt(5))
        if self.bias is not None and not glorot:
            nn.init.uniform_(self.bias, -1 / math.sqrt(d_in), 1 / math.sqrt(d_in))

    def forward(self, z: Tensor) -> Tensor:
        out = torch.bmm(z, self.weight.transpose(1, 2))
        return out if self.bias is None else out + self.bias.unsqueeze(1)


class ChannelConv(nn.Module):
    """One message-passing layer in every channel: GCN, Â_c Z W_c + b_c (Glorot weights, zero
    bias as DGL's GraphConv); SAGE, mean_c(Z) W_c + Z R_c + b_c."""

    def __init__(self, k: int, width: int, layer: str):
        super().__init__()
        self.linear = ChannelLinear(k, width, width, bias=True, glorot=True)
        self.root = ChannelLinear(k, width, width, bias=False) if layer == "sage" else None

    def forward(self, z: Tensor, edges: TypedEdges) -> Tensor:
        if self.root is None:
            return edges.propagate(torch.bmm(z, self.linear.weight.transpose(1, 2))) \
                + self.linear.bias.unsqueeze(1)
        return self.linear(edges.propagate(z)) + self.root(z)


class LinkTypeGNN(nn.Module):
    """Node classifier with ``link_types`` channels (see the module docstring)."""

    def __init__(self, in_dim: int, num_classes: int, opts: ModelOptions, link_types: int,
                 self_loops: bool = False):
        super().__init__()
        if opts.name not in CHANNEL_LAYERS:
            raise ValueError(f"FedLit's channels take model {', '.join(CHANNEL_LAYERS)}, "
                             f"not {opts.name!r}")
        h = opts.hidden
        self.opts, self.link_types, self.self_loops = opts, link_types, self_loops
        self.project = FeatureLinear(in_dim, h)
        self.prototypes = nn.Parameter(torch.zeros(link_types, 2 * h), requires_grad=False)
        self.lift = ChannelLinear(link_types, h, h)
        layers = 0 if opts.name == "sgc" else opts.layers
        self.convs = nn.ModuleList(ChannelConv(link_types, h, opts.name) for _ in range(layers))
        self.classifier = nn.Linear(h, num_classes)

    def prepare(self, graph: Data) -> Data:
        """The raw edges (the normalisation depends on the link types, which move every step);
        the features as CSR under ``model.sparse_features`` (the first step is linear)."""
        prepared = graph.clone()
        if self.opts.sparse_features:
            prepared.x = to_csr(prepared.x)
        return prepared

    def channel_edges(self, h: Tensor, edge_index: Tensor) -> TypedEdges:
        """The E-step on ``h`` and the channels' edges it gives."""
        types = assign_link_types(h.detach(), edge_index, self.prototypes.detach())
        norm = "mean" if self.opts.name == "sage" else "sym"
        return typed_edges(edge_index, types, len(h), self.link_types, norm, self.self_loops)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        h = self.project(x)
        edges = self.channel_edges(h, edge_index)
        z = self.lift(h.unsqueeze(0).expand(self.link_types, -1, -1))
        for conv in self.convs:
            z = dropout(F.relu(conv(z, edges)), self.opts.dropout, self.training)
        if self.opts.name == "sgc":
            for _ in range(self.opts.sgc_hops):
                z = edges.propagate(z)
        return self.classifier((z * edges.present.unsqueeze(2)).sum(0))


def node_projection(params: dict[str, Tensor], x: Tensor) -> Tensor:
    """The shared projection h = x Wᵀ + b under ``params`` (what the edge embeddings read)."""
    return linear(x, params["project.weight"], params["project.bias"])
