"""GNN backbones on PyG layers, for node classification, graph classification and, as the
encoder of a link predictor (``models.link``), link prediction.

Every model has ``prepare(graph)``: the per-graph work that does not depend on parameters (GCN's
symmetric normalisation, SGC's K-step propagation). It is computed once per client graph and
cached, not on every forward pass.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, Field
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import (
    GATConv,
    GCNConv,
    GINConv,
    SAGEConv,
)
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from graphfed.models.dropout import dropout
from graphfed.models.propagation import mean_pool, sum_pool, weighted_sum
from graphfed.models.sparse import FeatureLinear, linear, to_csr
from graphfed.validation import OPTIONS

ModelName = Literal["gcn", "sage", "sgc", "gat", "gin", "mlp", "mlp_sage"]
# the task levels each model serves (SGC and the shared FedEgo layer shape read one graph's
# nodes; GIN is FGFL/GPFL's graph-level backbone, and a node encoder at the edge level)
MODEL_LEVELS: dict[str, tuple[str, ...]] = {
    "gcn": ("node", "graph", "edge"), "sage": ("node", "graph", "edge"),
    "gat": ("node", "graph", "edge"), "mlp": ("node", "graph", "edge"), "sgc": ("node",),
    "mlp_sage": ("node",), "gin": ("graph", "edge"),
}
Decoder = Literal["inner", "hadamard_mlp"]


class ModelOptions(BaseModel):
    model_config = OPTIONS

    name: ModelName = "gcn"
    hidden: int = Field(64, ge=1)
    layers: int = Field(2, ge=1)
    dropout: float = Field(0.5, ge=0.0, lt=1.0)
    heads: int = Field(8, ge=1, description="GAT attention heads")
    sgc_hops: int = Field(2, ge=1, description="SGC propagation steps")
    pooling: Literal["add", "mean"] = Field("add", description="graph-level readout")
    sparse_features: bool | Literal["auto"] = Field(
        False, description="keep node features as a sparse CSR matrix and multiply it "
        "sparsely in the first layer: the same model (up to float summation order), many "
        "times faster on bag-of-words features (Coauthor-Physics: 0.4% non-zeros); node level, "
        "gcn, gat or mlp (the batched engine: gcn or mlp), full-graph training; auto: wherever "
        "the run allows it")
    decoder: Decoder = Field(
        "inner", description="edge level: how two node embeddings score a pair, their inner "
        "product (GAE's) or an MLP on their element-wise product (hadamard_mlp)")
    embedding: int | None = Field(
        None, ge=1, description="edge level: the width of the node embeddings the encoder's "
        "last layer outputs (GAE: 16 under hidden 32); default model.hidden")


# the node models whose first operation on the features is a linear map (a sparse product)
SPARSE_INPUT_MODELS = ("gcn", "gat", "mlp")


class GCNLayer(GCNConv):
    """PyG's ``GCNConv`` (its parameters, names and initialisation) on edges normalised once
    in ``prepare``, its neighbour sum one sparse product (``propagation.weighted_sum``)."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__(d_in, d_out, normalize=False)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None
                ) -> Tensor:
        out = weighted_sum(linear(x, self.lin.weight, self.lin.bias), edge_index, edge_weight)
        return out if self.bias is None else out + self.bias


class GINLayer(GINConv):
    """PyG's ``GINConv`` (fixed eps = 0; its parameters and names), its neighbour sum one
    sparse product: h' = MLP((1 + eps) h + sum_j h_j) (Xu et al., ICLR 2019, Eq. 4.1)."""

    def __init__(self, mlp: nn.Module):
        super().__init__(mlp, eps=0.0, train_eps=False)

    def forward(self, x: Tensor, edge_index: Tensor) -> Tensor:
        return self.nn(weighted_sum(x, edge_index, None) + (1 + self.eps) * x)


def message_passing_layer(name: str, d_in: int, d_out: int, opts: ModelOptions,
                          last: bool) -> nn.Module:
    if name == "gcn":
        return GCNLayer(d_in, d_out)
    if name == "sage":
        return SAGEConv(d_in, d_out)
    if name == "gat":
        heads = 1 if last else opts.heads
        return GATConv(d_in, d_out // heads, heads=heads, dropout=opts.dropout)
    if name == "gin":
        mlp = nn.Sequential(nn.Linear(d_in, d_out), nn.ReLU(), nn.Linear(d_out, d_out))
        return GINLayer(mlp)
    if name == "mlp":
        return FeatureLinear(d_in, d_out)
    raise ValueError(f"no message-passing layer named {name!r}")


def gcn_normalised(graph: Data) -> Data:
    """A copy of ``graph`` with GCN's self-looped, symmetrically normalised edges and weights
    (per-graph, so still valid after slicing a batch by graph), sorted by (target, source):
    the row order of the sparse product ``weighted_sum`` builds, kept by node-preserving
    slices."""
    out = graph.clone()
    edge_index, weight = gcn_norm(graph.edge_index, None, graph.num_nodes, add_self_loops=True)
    order = _by_target(edge_index, graph.num_nodes)
    out.edge_index, out.edge_weight = edge_index[:, order], weight[order]
    return out


def sgc_propagate(graph: Data, hops: int) -> Tensor:
    """SGC's features (Wu et al., ICML 2019): ``x`` smoothed ``hops`` times by the self-looped,
    symmetrically normalised adjacency, once per graph since no parameter enters."""
    edge_index, weight = gcn_norm(graph.edge_index, None, graph.num_nodes, add_self_loops=True)
    x = graph.x
    for _ in range(hops):
        x = weighted_sum(x, edge_index, weight)
    return x


def _prepare_edges(name: str, graph: Data) -> Data:
    """A copy of ``graph`` whose edges are ready for the layer type (GCN: normalised), sorted
    by target (the row order of the sparse products GCN and GIN layers take)."""
    if name == "gcn":
        return gcn_normalised(graph)
    order = _by_target(graph.edge_index, graph.num_nodes)
    out = graph.clone()
    out.edge_index = graph.edge_index[:, order]
    for key in ("edge_weight", "edge_attr"):
        if getattr(graph, key, None) is not None:
            out[key] = graph[key][order]
    return out


def _by_target(edge_index: Tensor, nodes: int) -> Tensor:
    """The order that sorts ``edge_index`` by (target, source)."""
    return torch.argsort(edge_index[1] * nodes + edge_index[0])


def propagate_inputs(name: str, edge_index: Tensor, edge_weight: Tensor | None):
    """MLP ignores edges; GCN takes the cached normalised weights; others take plain edges."""
    if name == "mlp":
        return ()
    if name == "gcn":
        return (edge_index, edge_weight)
    return (edge_index,)


class NodeStack(nn.Module):
    """``layers`` message-passing layers (ReLU between them, dropout before each) from node
    features to ``out_dim`` outputs per node: the classifier's logits, or a link predictor's
    node embeddings (``models.link``), the same stack and parameter names (``convs.<i>``)."""

    def __init__(self, in_dim: int, out_dim: int, opts: ModelOptions):
        super().__init__()
        self.opts = opts
        if opts.name == "sgc":
            self.convs = nn.ModuleList([nn.Linear(in_dim, out_dim)])
            return
        dims = [in_dim] + [opts.hidden] * (opts.layers - 1) + [out_dim]
        self.convs = nn.ModuleList(
            message_passing_layer(opts.name, dims[i], dims[i + 1], opts,
                                  last=i == opts.layers - 1)
            for i in range(opts.layers))

    def prepare(self, graph: Data) -> Data:
        """Cache what depends on the graph only: GCN normalisation, SGC propagated features."""
        if self.opts.name == "sgc":
            x = sgc_propagate(graph, self.opts.sgc_hops)
            return Data(x=x, edge_index=graph.edge_index[:, :0], num_nodes=graph.num_nodes)
        prepared = _prepare_edges(self.opts.name, graph)
        if self.opts.sparse_features:
            prepared.x = to_csr(prepared.x)
        return prepared

    def nodes(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None
              ) -> Tensor:
        """Every node's output of the last layer."""
        if self.opts.name == "sgc":
            return self.convs[0](x)
        inputs = propagate_inputs(self.opts.name, edge_index, edge_weight)
        for i, conv in enumerate(self.convs):
            x = dropout(x, self.opts.dropout, self.training, on_features=i == 0)
            x = conv(x, *inputs)
            if i < len(self.convs) - 1:
                x = F.relu(x)
        return x


class NodeClassifier(NodeStack):
    """A ``NodeStack`` whose last layer outputs class logits."""

    def __init__(self, in_dim: int, num_classes: int, opts: ModelOptions):
        if opts.name == "gin":
            raise ValueError("gin is a graph-level model here; use gcn, sage, sgc, gat or mlp")
        super().__init__(in_dim, num_classes, opts)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        return self.nodes(x, edge_index, edge_weight)


class MlpSageClassifier(nn.Module):
    """FedEgo's shared node-model shape (all its baselines use it): a reduction layer
    Linear(d, h) + ReLU, ``layers`` SAGEConv(h, h) layers with ReLU, dropout after the reduction
    and after the SAGE block, and a bias-free classifier Linear(h, C).

    Parameter names keep the parts apart: ``reduction.*`` (FedEgo's Θ), ``convs.*`` and
    ``classifier.*`` (its Φ). PyG's default initialisation (FedEgo's code: Kaiming-normal)."""

    def __init__(self, in_dim: int, num_classes: int, opts: ModelOptions):
        super().__init__()
        self.opts = opts
        h = opts.hidden
        self.reduction = nn.Linear(in_dim, h)
        self.convs = nn.ModuleList(SAGEConv(h, h) for _ in range(opts.layers))
        self.classifier = nn.Linear(h, num_classes, bias=False)

    def prepare(self, graph: Data) -> Data:
        return graph.clone()

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        x = dropout(F.relu(self.reduction(x)), self.opts.dropout, self.training)
        for conv in self.convs:
            x = F.relu(conv(x, edge_index))
        return self.classifier(dropout(x, self.opts.dropout, self.training))


class GraphClassifier(nn.Module):
    """Linear pre-layer, ``layers`` message-passing layers (ReLU + dropout after each), a sum
    (or mean) readout, a hidden post-layer and a linear classifier: the GIN backbone FGFL and
    GPFL share, with the layer type configurable."""

    def __init__(self, in_dim: int, num_classes: int, opts: ModelOptions):
        super().__init__()
        if opts.name in ("sgc", "mlp_sage"):
            raise ValueError(f"{opts.name} is a node-level model; use gin, gcn, sage, gat or mlp")
        self.opts = opts
        h = opts.hidden
        self.pre = nn.Linear(in_dim, h)
        self.convs = nn.ModuleList(message_passing_layer(opts.name, h, h, opts, last=False)
                                   for _ in range(opts.layers))
        self.post = nn.Linear(h, h)
        self.readout = nn.Linear(h, num_classes)
        self.pool = sum_pool if opts.pooling == "add" else mean_pool

    def prepare(self, graphs: Data) -> Data:
        return _prepare_edges(self.opts.name, graphs)

    def embed(self, x: Tensor, edge_index: Tensor, batch: Tensor, num_graphs: int,
              edge_weight: Tensor | None = None) -> Tensor:
        """Graph embeddings after the readout (what prototype-based methods share)."""
        x = self.pre(x)
        inputs = propagate_inputs(self.opts.name, edge_index, edge_weight)
        for conv in self.convs:
            x = dropout(F.relu(conv(x, *inputs)), self.opts.dropout, self.training)
        return self.pool(x, batch, num_graphs)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor, num_graphs: int,
                edge_weight: Tensor | None = None, with_embedding: bool = False
                ) -> Tensor | tuple[Tensor, Tensor]:
        """Class logits; with ``with_embedding`` also the graph embeddings they came from."""
        h = self.embed(x, edge_index, batch, num_graphs, edge_weight)
        out = self.readout(dropout(F.relu(self.post(h)), self.opts.dropout, self.training))
        return (out, h) if with_embedding else out
