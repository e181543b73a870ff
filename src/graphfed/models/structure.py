"""Structure encodings of nodes and FedStar's dual-channel GIN (Tan et al., AAAI 2023).

FedStar describes every node by two parameter-free encodings of the graph's shape alone:

* random-walk landing probabilities: for k = 1..16, the probability that a k-step random walk
  started at the node is back at it (the diagonal of the k-th power of the random-walk matrix;
  PyG's ``AddRandomWalkPE``);
* a one-hot degree: degree clipped to 1..16 (an isolated node counts as degree 1, as in FedStar).

The model runs a structure channel (a linear embedding of those 32 numbers, then GCN layers with
tanh) beside a feature channel (GIN layers); before each GIN layer the structure channel's current
embedding is concatenated to the node features. Only the structure channel is meant to be shared
between clients: its parameters are the ones named ``structure.*``. ``DualChannelNodeGNN`` is
our node-level adaptation (per-node logits, the configured backbone as feature channel).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv
from torch_geometric.transforms import AddRandomWalkPE
from torch_geometric.utils import coalesce, degree

from graphfed.models.gnn import (
    ModelOptions,
    gcn_normalised,
    message_passing_layer,
    propagate_inputs,
    sgc_propagate,
)
from graphfed.models.propagation import mean_pool, sum_pool

RW_STEPS = 16
DEGREE_DIMS = 16
STRUCTURE_PREFIX = "structure."
# backbones the node-level feature channel can use (mlp_sage has its own fixed shape)
NODE_FEATURE_LAYERS = ("gcn", "sage", "gat", "mlp", "sgc")


def _graph_index(batch: Tensor | None, num_nodes: int) -> tuple[Tensor, int]:
    """The graph of each node (all zeros for a single graph) and the number of graphs."""
    if batch is None:
        return torch.zeros(num_nodes, dtype=torch.long), 1
    batch = batch.long().cpu()
    if batch.numel() != num_nodes:
        raise ValueError(f"batch has {batch.numel()} entries for {num_nodes} nodes")
    if batch.numel() and bool((batch[1:] < batch[:-1]).any()):
        raise ValueError("the nodes of each graph must be contiguous (a collated batch)")
    return batch, int(batch.max()) + 1 if batch.numel() else 0


def random_walk_encoding(edge_index: Tensor, num_nodes: int, batch: Tensor | None = None,
                         steps: int = RW_STEPS) -> Tensor:
    """``[num_nodes, steps]`` return probabilities of 1..``steps``-step random walks.

    Computed graph by graph (``batch`` gives each node's graph in a collated batch), so a batch of
    disjoint graphs gets exactly the rows its graphs get alone, and no dense matrix spans more
    than one graph. Duplicate edges count once; a node without edges gets zeros."""
    graph, num_graphs = _graph_index(batch, num_nodes)
    edge_index = coalesce(edge_index.long().cpu(), num_nodes=num_nodes)
    if bool((graph[edge_index[0]] != graph[edge_index[1]]).any()):
        raise ValueError("an edge joins two different graphs of the batch")
    first_node = torch.cumsum(torch.bincount(graph, minlength=num_graphs), 0)
    first_node = torch.cat([first_node.new_zeros(1), first_node])
    # coalesced edges are sorted by source node, hence grouped by graph in batch order
    edge_counts = torch.bincount(graph[edge_index[0]], minlength=num_graphs).tolist()
    transform = AddRandomWalkPE(walk_length=steps, attr_name="rw")
    out = torch.zeros(num_nodes, steps)
    for g, edges in enumerate(edge_index.split(edge_counts, dim=1)):
        start, end = int(first_node[g]), int(first_node[g + 1])
        if end == start or edges.numel() == 0:
            continue
        walk = transform(Data(edge_index=edges - start, num_nodes=end - start))
        out[start:end] = walk.rw
    return out


def degree_encoding(edge_index: Tensor, num_nodes: int, dims: int = DEGREE_DIMS) -> Tensor:
    """``[num_nodes, dims]`` one-hot of the (out-)degree clipped to 1..``dims`` (duplicate edges
    count once). Degree is local to a node, so a collated batch needs no special care."""
    edge_index = coalesce(edge_index.long().cpu(), num_nodes=num_nodes)
    deg = degree(edge_index[0], num_nodes, dtype=torch.long).clamp(1, dims)
    return F.one_hot(deg - 1, dims).float()


def structure_encoding(edge_index: Tensor, num_nodes: int, batch: Tensor | None = None,
                       rw_steps: int = RW_STEPS, degree_dims: int = DEGREE_DIMS) -> Tensor:
    """FedStar's ``rw_dg`` encoding: random-walk landing probabilities, then one-hot degree."""
    return torch.cat([random_walk_encoding(edge_index, num_nodes, batch, rw_steps),
                      degree_encoding(edge_index, num_nodes, degree_dims)], dim=1)


class StructureChannel(nn.Module):
    """Embeds the structure encoding and refines it with GCN layers (tanh): the shared part."""

    def __init__(self, encoding_dim: int, hidden: int, layers: int):
        super().__init__()
        self.embed = nn.Linear(encoding_dim, hidden)
        self.convs = nn.ModuleList(GCNConv(hidden, hidden) for _ in range(layers))


class DualChannel(nn.Module):
    """What FedStar's two models share: ``pre`` (the feature channel's input layer), the
    structure channel, the feature channel's layers of type ``layer`` over ``[h, s]`` and
    ``combine``. Per layer ``i``: ``h = dropout(relu(layer_i([h, s])))`` and
    ``s = tanh(GCN_i(s))``; the node states are ``combine([h, s])``.

    ``prepare`` appends the structure encoding to ``x`` (a slice of a collated batch, or of a
    sampled neighbourhood, keeps it with its nodes); the forward pass splits it off again."""

    def __init__(self, in_dim: int, opts: ModelOptions, layer: str, rw_steps: int,
                 degree_dims: int):
        super().__init__()
        self.in_dim, self.rw_steps, self.degree_dims = in_dim, rw_steps, degree_dims
        self.dropout, self.layer = opts.dropout, layer
        h = opts.hidden
        self.structure = StructureChannel(rw_steps + degree_dims, h, opts.layers)
        self.pre = nn.Linear(in_dim, h)
        self.convs = nn.ModuleList(message_passing_layer(layer, 2 * h, h, opts, last=False)
                                   for _ in range(opts.layers))
        self.combine = nn.Linear(2 * h, h)

    @property
    def encoding_dim(self) -> int:
        return self.rw_steps + self.degree_dims

    def with_encoding(self, graphs: Data, out: Data, x: Tensor) -> Data:
        """``out`` with ``x`` followed by the structure encoding of ``graphs`` as its features."""
        encoding = structure_encoding(graphs.edge_index, graphs.num_nodes,
                                      getattr(graphs, "batch", None), self.rw_steps,
                                      self.degree_dims)
        out.x = torch.cat([x, encoding.to(x.device, x.dtype)], dim=1)
        return out

    def node_states(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None) -> Tensor:
        if x.size(1) != self.in_dim + self.encoding_dim:
            raise ValueError(f"expected {self.in_dim} features plus the {self.encoding_dim}-dim "
                             f"structure encoding, got {x.size(1)} columns (was prepare run?)")
        h, s = self.pre(x[:, :self.in_dim]), self.structure.embed(x[:, self.in_dim:])
        inputs = propagate_inputs(self.layer, edge_index, edge_weight)
        for conv, structure_conv in zip(self.convs, self.structure.convs, strict=True):
            h = F.dropout(F.relu(conv(torch.cat([h, s], dim=-1), *inputs)), self.dropout,
                          self.training)
            s = torch.tanh(structure_conv(s, edge_index))
        return self.combine(torch.cat([h, s], dim=-1))


class DualChannelGIN(DualChannel):
    """FedStar's GIN_dc: GIN feature layers; the node states are pooled (sum or mean), then
    ``post`` (ReLU, dropout) and ``readout``."""

    def __init__(self, in_dim: int, num_classes: int, opts: ModelOptions,
                 rw_steps: int = RW_STEPS, degree_dims: int = DEGREE_DIMS):
        super().__init__(in_dim, opts, "gin", rw_steps, degree_dims)
        h = opts.hidden
        self.post = nn.Linear(h, h)
        self.readout = nn.Linear(h, num_classes)
        self.pool = sum_pool if opts.pooling == "add" else mean_pool

    def prepare(self, graphs: Data) -> Data:
        return self.with_encoding(graphs, graphs.clone(), graphs.x)

    def embed(self, x: Tensor, edge_index: Tensor, batch: Tensor, num_graphs: int,
              edge_weight: Tensor | None = None) -> Tensor:
        """Graph embeddings after the pooling."""
        return self.pool(self.node_states(x, edge_index, edge_weight), batch, num_graphs)

    def forward(self, x: Tensor, edge_index: Tensor, batch: Tensor, num_graphs: int,
                edge_weight: Tensor | None = None, with_embedding: bool = False
                ) -> Tensor | tuple[Tensor, Tensor]:
        g = self.embed(x, edge_index, batch, num_graphs, edge_weight)
        out = self.readout(F.dropout(F.relu(self.post(g)), self.dropout, self.training))
        return (out, g) if with_embedding else out


class DualChannelNodeGNN(DualChannel):
    """FedStar adapted to node classification (our adaptation: FedStar is graph-level and
    FedSpray, which compares against it on node tasks, never says how it was run).

    As at graph level, with no pooling: each node's ``combine([h, s])`` goes through ReLU and
    dropout to a linear ``readout`` of class logits. The structure encoding of a node is computed
    on the client's own subgraph (its induced subgraph: random walks and degrees never see edges
    to other clients' nodes), once, in ``prepare``. The feature channel uses the configured
    layer type (``model.name``: gcn, sage, gat, mlp; sgc smooths the features ``sgc_hops`` times
    in ``prepare`` and then uses linear layers), so FedStar runs on the same backbone as the
    other baselines; the structure channel is GCN with tanh, as in FedStar."""

    def __init__(self, in_dim: int, num_classes: int, opts: ModelOptions,
                 rw_steps: int = RW_STEPS, degree_dims: int = DEGREE_DIMS):
        if opts.name not in NODE_FEATURE_LAYERS:
            raise ValueError(f"FedStar's node-level feature channel takes model "
                             f"{', '.join(NODE_FEATURE_LAYERS)}, not {opts.name!r}")
        super().__init__(in_dim, opts, "mlp" if opts.name == "sgc" else opts.name, rw_steps,
                         degree_dims)
        self.backbone, self.sgc_hops = opts.name, opts.sgc_hops
        self.readout = nn.Linear(opts.hidden, num_classes)

    def prepare(self, graph: Data) -> Data:
        """Structure encoding of the client's subgraph; GCN's normalised edges; SGC features."""
        out = gcn_normalised(graph) if self.layer == "gcn" else graph.clone()
        x = sgc_propagate(graph, self.sgc_hops) if self.backbone == "sgc" else graph.x
        return self.with_encoding(graph, out, x)

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None) -> Tensor:
        h = self.node_states(x, edge_index, edge_weight)
        return self.readout(F.dropout(F.relu(h), self.dropout, self.training))


def structure_names(params) -> list[str]:
    """Names of the structure channel's parameters (what FedStar shares)."""
    names = [k for k in params if k.startswith(STRUCTURE_PREFIX)]
    if not names:
        raise ValueError("no structure-channel parameters ('structure.*') in the model")
    return names


def build_dual_channel(level: str, in_dim: int, num_classes: int,
                       opts: ModelOptions, method_options=None) -> DualChannel:
    """Model factory: the configured hidden size, layer count, dropout and pooling (FedStar's
    own setting is 64 hidden, 3 layers, dropout 0.5, sum pooling). At graph level the feature
    channel is GIN whatever ``model.name``; at node level it is ``model.name``."""
    if level == "node":
        return DualChannelNodeGNN(in_dim, num_classes, opts)
    return DualChannelGIN(in_dim, num_classes, opts)
