"""Client data moved to the device once, prepared once, and cut into mini-batches with tensor ops.

Graph-level clients are collated into one big batch per split a single time; a mini-batch is a
set of whole graphs sliced out of it (no DataLoader re-collating every epoch). Edge-level
clients hold their message-passing graphs prepared once and score node pairs over them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal, Protocol, cast, overload

import torch
from torch import Tensor, nn
from torch_geometric.data import Batch, Data
from torch_geometric.utils import negative_sampling

from graphfed.data.edges import training_adjacency
from graphfed.data.federated import SPLITS, ClientData, EdgeClient, GraphClient, NodeClient
from graphfed.data.sampling import WHOLE_GRAPH_WEIGHTS, NeighbourSampler, SamplingOptions
from graphfed.errors import GraphfedError
from graphfed.metrics import majority_class
from graphfed.regression import TargetScale

# a node-level model's inputs (features, edges, edge weights) and a graph-level one's (features,
# edges, each node's graph, the number of graphs, edge weights)
NodeInputs = tuple[Tensor, Tensor, Tensor | None]
GraphInputs = tuple[Tensor, Tensor, Tensor, int, Tensor | None]


class ModelCall(Protocol):
    """``model``'s forward pass on ``args`` (and keyword ``kwargs``) under parameters the
    caller holds (``torch.func.functional_call``): what the model returns, which ``nn.Module``
    types as ``Any``."""

    def __call__(self, model: nn.Module, args: tuple[Any, ...],
                 kwargs: dict[str, Any] | None = None, /) -> Any: ...


class _Prepares(Protocol):
    """What every graphfed model has beside ``nn.Module`` (``models.gnn``): ``prepare``, the
    per-graph work that does not depend on parameters."""

    def prepare(self, graph: Data) -> Data: ...


def _prepare(model: nn.Module, graph: Data) -> Data:
    return cast(_Prepares, model).prepare(graph)  # nn.Module's type declares no prepare


def permutation(n: int, device: torch.device, generator: torch.Generator | None) -> Tensor:
    """A random order of ``n`` items on ``device``: from the global RNG of that device, or from
    ``generator`` (drawn on the CPU: the same stream on every device)."""
    if generator is None:
        return torch.randperm(n, device=device)
    return torch.randperm(n, generator=generator).to(device)


@dataclass
class NodeBatch:
    """Full-graph inputs; the loss is taken on ``index`` nodes."""

    x: Tensor
    edge_index: Tensor
    edge_weight: Tensor | None
    y: Tensor
    index: Tensor

    @overload
    def forward(self, model: nn.Module, call: ModelCall) -> Tensor: ...

    @overload
    def forward(self, model: nn.Module, call: ModelCall, *, with_embedding: Literal[True]
                ) -> tuple[Tensor, Tensor]: ...

    def forward(self, model: nn.Module, call: ModelCall, **kwargs: bool
                ) -> Tensor | tuple[Tensor, Tensor]:
        """The ``index`` nodes' logits; ``with_embedding=True`` (a model that returns node
        embeddings too): (logits, node embeddings)."""
        if kwargs.get("with_embedding"):
            logits, embedding = call(model, (self.x, self.edge_index, self.edge_weight), kwargs)
            return logits[self.index], embedding[self.index]
        out: Tensor = call(model, (self.x, self.edge_index, self.edge_weight))
        return out[self.index]

    @property
    def targets(self) -> Tensor:
        return self.y[self.index]


@dataclass
class GraphBatch:
    x: Tensor
    edge_index: Tensor
    edge_weight: Tensor | None
    batch: Tensor
    num_graphs: int
    y: Tensor
    ids: Tensor  # positions of these graphs in their split

    @overload
    def forward(self, model: nn.Module, call: ModelCall) -> Tensor: ...

    @overload
    def forward(self, model: nn.Module, call: ModelCall, *, with_embedding: Literal[True]
                ) -> tuple[Tensor, Tensor]: ...

    def forward(self, model: nn.Module, call: ModelCall, **kwargs: bool
                ) -> Tensor | tuple[Tensor, Tensor]:
        """The graphs' logits; ``with_embedding=True``: (logits, graph embeddings)."""
        out: Tensor | tuple[Tensor, Tensor] = call(
            model, (self.x, self.edge_index, self.batch, self.num_graphs, self.edge_weight),
            kwargs)
        return out

    @property
    def targets(self) -> Tensor:
        return self.y


@dataclass
class EdgeBatch:
    """Node pairs to score over a message-passing graph: ``pairs`` [2, P], ``y`` True where a
    pair is an edge (``graphfed.linkpred``)."""

    x: Tensor
    edge_index: Tensor
    edge_weight: Tensor | None
    pairs: Tensor
    y: Tensor

    def forward(self, model: nn.Module, call: ModelCall) -> Tensor:
        """The pairs' logits (a ``models.link.LinkPredictor``'s)."""
        out: Tensor = call(model, (self.x, self.edge_index, self.edge_weight, self.pairs))
        return out

    @property
    def targets(self) -> Tensor:
        return self.y


@dataclass
class AdjacencyBatch(EdgeBatch):
    """Every node pair at once (``edges.loss: full``): ``pairs`` the training edges, ``y`` the
    [N, N] training adjacency with its diagonal set, which ``mean_loss`` takes as GAE's
    reconstruction target (``graphfed.reconstruction``)."""

    def forward(self, model: nn.Module, call: ModelCall) -> Tensor:
        """The [N, N] logits of every ordered pair."""
        out: Tensor = call(model, (self.x, self.edge_index, self.edge_weight, None))
        return out


# a batch of any task level: what ``PreparedClient.batches`` yields
AnyBatch = NodeBatch | GraphBatch | EdgeBatch


class _TrainMajority:
    """What both kinds of prepared client share: the majority of their training labels (read
    through the class's own ``labels``)."""

    labels: Callable[[str], Tensor]  # each class's own method
    # a regression client's standardisation (its targets are held standardised); None: labels
    target_scale: TargetScale | None = None

    @cached_property
    def train_majority(self) -> int | None:
        """The most frequent training label (the smallest on a tie; None without any): the
        class the minority metrics leave out. Computed once: the labels never change."""
        return majority_class(self.labels("train"))


class PreparedNodeClient(_TrainMajority):
    """A node-level client on the device. Mini-batches are its training nodes over the whole
    graph, or, with ``sampling.fanouts``, over their sampled neighbourhoods (see
    ``SamplingOptions``); each epoch may train on a fresh subset (``sampling.train_fraction``)."""

    x: Tensor
    edge_index: Tensor
    edge_weight: Tensor | None
    y: Tensor

    def __init__(self, client: NodeClient, model: nn.Module, device: torch.device,
                 sampling: SamplingOptions | None = None):
        g = _prepare(model, client.graph).to(device)
        self.x, self.edge_index = g.x, g.edge_index
        self.edge_weight = getattr(g, "edge_weight", None)
        self.y = client.graph.y.to(device)
        self.index = {s: torch.nonzero(getattr(client.graph, f"{s}_mask")).view(-1).to(device)
                      for s in SPLITS}
        self.sampling = sampling or SamplingOptions()
        if self.sampling.fanouts and self.edge_weight is not None:
            raise GraphfedError(f"sampling.fanouts: {type(model).__name__} "
                                f"{WHOLE_GRAPH_WEIGHTS}")
        self.sampler = (NeighbourSampler(self.edge_index, len(self.y))
                        if self.sampling.fanouts else None)
        # the raw subgraph and its nodes' ids in the full graph, for methods that exchange
        # per-node statistics before training (FedGCN); not moved to the device
        self.graph, self.global_ids = client.graph, client.global_ids

    def num_samples(self, split: str) -> int:
        return len(self.index[split])

    @property
    def evaluation_draws(self) -> bool:
        """Whether scoring this client draws random numbers (sampled neighbourhoods)."""
        return self.sampler is not None and self.sampling.evaluate == "sampled"

    def labels(self, split: str) -> Tensor:
        return self.y[self.index[split]]

    def batch_of(self, nodes: Tensor) -> NodeBatch:
        """The loss inputs for distinct ``nodes``: the whole graph, or their sampled
        neighbourhood (read through ``self.x``, so a view with other features samples those)."""
        if self.sampler is None:
            return NodeBatch(self.x, self.edge_index, self.edge_weight, self.y, nodes)
        assert self.sampling.fanouts is not None  # a sampler is made for fanouts only
        ids, edges = self.sampler.subgraph(nodes, self.sampling.fanouts)
        return NodeBatch(self.x[ids], edges, None, self.y[ids],
                         torch.arange(len(nodes), device=nodes.device))

    def outputs(self, model: nn.Module, call: ModelCall, splits: Iterable[str]
                ) -> dict[str, tuple[Tensor, Tensor]]:
        """Logits and targets per split: one full-graph forward pass, or with sampled
        evaluation each split's nodes on a sampled neighbourhood."""
        wanted = [s for s in splits if self.num_samples(s)]
        if self.sampler is not None and self.sampling.evaluate == "sampled":
            batches = {s: self.batch_of(self.index[s]) for s in wanted}
            return {s: (b.forward(model, call), b.targets) for s, b in batches.items()}
        logits: Tensor = call(model, (self.x, self.edge_index, self.edge_weight))
        return {s: (logits[self.index[s]], self.y[self.index[s]]) for s in wanted}

    def epoch_nodes(self, split: str, batch_size: int | None, shuffle: bool,
                    generator: torch.Generator | None = None) -> Tensor:
        """The nodes one epoch visits, in order: on the train split a fresh random subset of
        ``train_fraction`` of the client's node count; shuffled when cut into mini-batches."""
        index = self.index[split]
        subsample = split == "train" and self.sampling.train_fraction < 1.0
        whole = batch_size is None or batch_size >= len(index)
        if subsample or (shuffle and not whole):
            index = index[permutation(len(index), index.device, generator)]
        if subsample:
            index = index[:max(1, int(len(self.y) * self.sampling.train_fraction))]
        return index

    def batches(self, split: str, batch_size: int | None, shuffle: bool,
                generator: torch.Generator | None = None) -> Iterator[NodeBatch]:
        """One epoch's batches; shuffled by ``generator`` where one is given (a CPU generator:
        the batched engine's per-client stream), else by the global RNG."""
        index = self.epoch_nodes(split, batch_size, shuffle, generator)
        if batch_size is None or batch_size >= len(index):
            yield self.batch_of(index)
            return
        for chunk in index.split(batch_size):
            yield self.batch_of(chunk)


class _CollatedGraphs:
    """One split's graphs collated once; ``take`` slices out a set of whole graphs."""

    x: Tensor
    edge_index: Tensor
    edge_weight: Tensor | None
    y: Tensor
    batch: Tensor

    def __init__(self, graphs: list[Data], model: nn.Module, device: torch.device,
                 scale: TargetScale | None = None):
        self.num_graphs = len(graphs)
        if not graphs:
            return
        collated = Batch.from_data_list(
            [Data(x=g.x, edge_index=g.edge_index, y=g.y, num_nodes=g.num_nodes) for g in graphs])
        prepared = _prepare(model, collated).to(device)
        self.x, self.edge_index, self.y = prepared.x, prepared.edge_index, prepared.y
        if scale is not None:
            self.y = scale.standardise(self.y)
        self.edge_weight = getattr(prepared, "edge_weight", None)
        self.batch = collated.batch.to(device)

    def all(self) -> GraphBatch:
        """The whole split as one batch: the same object every call (nothing mutates a
        batch), so an evaluation every round builds nothing."""
        return self._all

    @cached_property
    def _all(self) -> GraphBatch:
        return GraphBatch(self.x, self.edge_index, self.edge_weight, self.batch, self.num_graphs,
                          self.y, torch.arange(self.num_graphs, device=self.batch.device))

    def take(self, graph_ids: Tensor) -> GraphBatch:
        keep_graph = torch.zeros(self.num_graphs, dtype=torch.bool, device=self.batch.device)
        keep_graph[graph_ids] = True
        keep_node = keep_graph[self.batch]
        keep_edge = keep_node[self.edge_index[0]]
        new_node = torch.cumsum(keep_node, 0) - 1
        new_graph = torch.cumsum(keep_graph, 0) - 1
        weight = self.edge_weight[keep_edge] if self.edge_weight is not None else None
        return GraphBatch(self.x[keep_node], new_node[self.edge_index[:, keep_edge]], weight,
                          new_graph[self.batch[keep_node]], len(graph_ids), self.y[keep_graph],
                          torch.nonzero(keep_graph).view(-1))


def collate_graphs(graphs: list[Data], model: nn.Module, device: torch.device) -> GraphBatch:
    """``graphs`` as one prepared batch on ``device`` (a fixed probe set, e.g. GPFL's random
    graphs)."""
    return _CollatedGraphs(graphs, model, device).all()


class PreparedGraphClient(_TrainMajority):
    evaluation_draws = False  # whole graphs are scored: no draw

    def __init__(self, client: GraphClient, model: nn.Module, device: torch.device):
        self.target_scale = _target_scale(client)
        self.splits = {s: _CollatedGraphs(client.graphs[s], model, device, self.target_scale)
                       for s in SPLITS}
        self.graphs = client.graphs  # the raw graphs, for structure statistics (e.g. motifs)

    def num_samples(self, split: str) -> int:
        return self.splits[split].num_graphs

    def labels(self, split: str) -> Tensor:
        graphs = self.splits[split]
        return graphs.y if graphs.num_graphs else torch.empty(0, dtype=torch.long)

    def outputs(self, model: nn.Module, call: ModelCall, splits: Iterable[str]
                ) -> dict[str, tuple[Tensor, Tensor]]:
        """Logits and targets per split, each split in one batched forward pass."""
        out: dict[str, tuple[Tensor, Tensor]] = {}
        for s in splits:
            if self.num_samples(s):
                batch = self.splits[s].all()
                out[s] = (batch.forward(model, call), batch.targets)
        return out

    def batches(self, split: str, batch_size: int | None, shuffle: bool,
                generator: torch.Generator | None = None) -> Iterator[GraphBatch]:
        """One epoch's mini-batches of whole graphs (see ``PreparedNodeClient.batches``)."""
        graphs = self.splits[split]
        n = graphs.num_graphs
        if n == 0:
            return
        if batch_size is None or batch_size >= n:
            yield graphs.all()
            return
        device = graphs.batch.device
        order = (permutation(n, device, generator) if shuffle
                 else torch.arange(n, device=device))
        for chunk in order.split(batch_size):
            yield graphs.take(chunk)


class PreparedEdgeClient:
    """An edge-level client on the device (``graphfed.data.edges``): its message-passing graphs
    prepared once, the training graph (training and validation predictions) and the training
    plus validation graph (test predictions), and its supervision pairs. An epoch is one
    full-graph batch: the training edges and ``train_negatives`` times as many negative pairs,
    drawn fresh (PyG's ``negative_sampling`` against the training edges, from the global RNG,
    which each party's call seeds); with ``edges.loss: full`` it is every node pair against the
    training adjacency instead (``AdjacencyBatch``). Evaluation scores the fixed negatives of
    validation and test; scoring the training split draws negatives as sampled training does."""

    evaluation_draws = True  # the training split's negatives (validation and test draw none)
    target_scale: TargetScale | None = None  # pairs, not real targets
    train_majority: int | None = None  # no class to leave out

    def __init__(self, client: EdgeClient, model: nn.Module, device: torch.device):
        split = client.edges
        self.num_nodes = client.num_nodes
        self.train_negatives = split.train_negatives
        self.train_edges = split.message_passing("train").to(device)
        graphs = {s: _prepare(model, Data(x=client.graph.x, edge_index=split.message_passing(s),
                                          num_nodes=client.num_nodes)).to(device)
                  for s in ("train", "test")}
        self.graphs = {s: graphs["test" if s == "test" else "train"] for s in SPLITS}
        self.positive = {s: split.positive[s].to(device) for s in SPLITS}
        self.negative = {s: split.negative[s].to(device) for s in split.negative}
        self.adjacency = (training_adjacency(split, client.num_nodes).to(device)
                          if split.full_loss else None)

    def num_samples(self, split: str) -> int:
        return self.positive[split].size(1)

    def _scored(self, split: str, pairs: Tensor, positives: int) -> EdgeBatch:
        """``pairs`` of ``split``, the first ``positives`` of them edges, over the graph its
        predictions pass messages on."""
        g = self.graphs[split]
        y = torch.zeros(pairs.size(1), dtype=torch.bool, device=pairs.device)
        y[:positives] = True
        return EdgeBatch(g.x, g.edge_index, getattr(g, "edge_weight", None), pairs, y)

    def batch_of(self, split: str, chosen: Tensor | None = None) -> EdgeBatch:
        """``split``'s positive pairs (those at positions ``chosen``, default all) and its
        negatives: the fixed ones of validation and test, fresh ones for training."""
        positive = self.positive[split] if chosen is None else self.positive[split][:, chosen]
        negative = self.negative.get(split)
        if negative is None:
            negative = negative_sampling(self.train_edges, self.num_nodes,
                                         int(self.train_negatives * positive.size(1)))
        return self._scored(split, torch.cat([positive, negative], dim=1), positive.size(1))

    def outputs(self, model: nn.Module, call: ModelCall, splits: Iterable[str]
                ) -> dict[str, tuple[Tensor, Tensor]]:
        """Pair logits and targets of each split that has positive and negative pairs."""
        out: dict[str, tuple[Tensor, Tensor]] = {}
        for s in splits:
            batch = self.batch_of(s)
            if 0 < self.num_samples(s) < batch.pairs.size(1):
                out[s] = (batch.forward(model, call), batch.targets)
        return out

    def batches(self, split: str, batch_size: int | None, shuffle: bool,
                generator: torch.Generator | None = None) -> Iterator[EdgeBatch]:
        """One epoch: the whole split in one batch (the edge level has no mini-batches)."""
        if not self.num_samples(split):
            return
        if split == "train" and self.adjacency is not None:
            g = self.graphs[split]
            yield AdjacencyBatch(g.x, g.edge_index, getattr(g, "edge_weight", None),
                                 self.train_edges, self.adjacency)
        else:
            yield self.batch_of(split)


def _target_scale(client: GraphClient) -> TargetScale | None:
    """A regression client's standardisation, from its training targets only; None for class
    labels. A set of graphs with real targets and no training graph (a global test set) has
    no scale of its own to score a client's predictions by, and is refused."""
    first = next((g for graphs in client.graphs.values() for g in graphs), None)
    if first is None or not first.y.is_floating_point():
        return None
    if not client.graphs["train"]:
        raise GraphfedError("a regression client standardises its targets by its own training "
                            "graphs, and this set has none (a global test set: leave "
                            "partition.global_test unset; a client: use fewer clients)")
    return TargetScale.of(client.labels("train"))


PreparedClient = PreparedNodeClient | PreparedGraphClient | PreparedEdgeClient


def prepare_client(client: ClientData, model: nn.Module, device: torch.device,
                   sampling: SamplingOptions | None = None) -> PreparedClient:
    if isinstance(client, EdgeClient):
        return PreparedEdgeClient(client, model, device)
    if isinstance(client, NodeClient):
        return PreparedNodeClient(client, model, device, sampling)
    return PreparedGraphClient(client, model, device)
