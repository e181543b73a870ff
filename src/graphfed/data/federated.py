"""Federated data: a dataset split into clients, saved as an artifact keyed by every parameter.

The artifact stores ids, not features: each client's global node (or graph) ids, the split of
each id, the global test ids and any perturbed edges, and, where a partition makes them, the
server's public node ids and the clients' true overlap ratios. ``materialize`` rebuilds the
clients from the dataset, so a run can reload exactly the same partition cheaply.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.utils import subgraph

from graphfed.data.datasets import GraphDataset, Level, cache_dir, save_to_cache
from graphfed.data.partition import (
    PartitionBase,
    RatioPartition,
    check_flip_length,
    check_partition_level,
    check_partition_task,
)
from graphfed.data.partition.base import PublishedSplitOption
from graphfed.data.partition.fedego import renumbered_graph
from graphfed.data.partition.graph import flip_edges
from graphfed.data.partition.plan import TRAIN, SplitPlan
from graphfed.serialization import safe_load

SPLITS = ("train", "val", "test")
ARTIFACT_VERSION = 1


@dataclass
class NodeClient:
    """One client's induced subgraph; ``global_ids`` maps its nodes back to the full graph."""

    graph: Data
    global_ids: torch.Tensor
    lost_edges: int = 0

    def num_samples(self, split: str) -> int:
        return int(getattr(self.graph, f"{split}_mask").sum())

    @property
    def num_nodes(self) -> int:
        return int(self.graph.num_nodes)

    def labels(self, split: str) -> torch.Tensor:
        return self.graph.y[getattr(self.graph, f"{split}_mask")]


@dataclass(frozen=True)
class EdgeSplit:
    """A client's supervision pairs, local node ids, each pair once with the smaller id first
    (shape [2, n]): ``positive`` per split, ``negative`` for validation and test; and how many
    negatives per training edge its training draws each epoch, or (``full_loss``) that it trains
    on every node pair instead (``edges.loss: full``)."""

    positive: dict[str, Tensor]
    negative: dict[str, Tensor]
    train_negatives: float
    full_loss: bool = False

    def message_passing(self, split: str) -> Tensor:
        """The edges (both directions) the encoder passes messages over when ``split`` is
        predicted: the training edges, and for the test split the validation edges too."""
        held = ("train", "val") if split == "test" else ("train",)
        pairs = torch.cat([self.positive[s] for s in held], dim=1)
        return torch.cat([pairs, pairs.flip(0)], dim=1)


@dataclass
class EdgeClient(NodeClient):
    """A node client at the edge level (``graphfed.data.edges``): the partition's nodes and
    induced subgraph (all its own edges, with the nodes' labels and masks, which describe the
    partition), and ``edges``, its split into supervision edges and negatives, from which the
    encoder's message-passing graphs are built (never from ``graph.edge_index``). A split's
    samples are its positive supervision edges."""

    edges: EdgeSplit = field(kw_only=True)

    def num_samples(self, split: str) -> int:
        return int(self.edges.positive[split].size(1))


@dataclass
class GraphClient:
    """One client's graphs, per split; ``global_ids`` are their indices in the dataset."""

    graphs: dict[str, list[Data]]
    global_ids: dict[str, torch.Tensor]

    def num_samples(self, split: str) -> int:
        return len(self.graphs[split])

    @property
    def num_nodes(self) -> int:
        return sum(int(g.num_nodes) for graphs in self.graphs.values() for g in graphs)

    def labels(self, split: str) -> torch.Tensor:
        graphs = self.graphs[split]
        return torch.cat([g.y for g in graphs]) if graphs else torch.empty(0, dtype=torch.long)


ClientData = NodeClient | GraphClient
# a dataset's level, or the edge level a node-level dataset's clients are split into
TaskLevel = Literal["node", "graph", "edge"]


@dataclass
class PartitionArtifact:
    id: str
    params: dict
    level: Level
    client_ids: list[torch.Tensor]
    client_splits: list[torch.Tensor]  # per id: 0 train, 1 val, 2 test
    global_test_ids: torch.Tensor
    perturbed_edges: list[dict[int, torch.Tensor]] = field(default_factory=list)
    edge_relabel: torch.Tensor | None = None  # node-level: the split graph's edges were renumbered
    public_ids: torch.Tensor | None = None  # node-level: the nodes the server itself holds
    overlap: dict[str, torch.Tensor] | None = None  # true pairwise overlap ratios, if any


@dataclass
class FederatedData:
    dataset: str
    level: TaskLevel
    num_features: int
    num_classes: int
    clients: list[ClientData]
    global_test: ClientData | None
    partition_id: str
    public: NodeClient | None = None  # the server's own nodes (all TRAIN); never a client's
    overlap: dict[str, torch.Tensor] | None = None  # "node"/"link": N×N true overlap ratios

    @property
    def num_clients(self) -> int:
        return len(self.clients)


def partition_params(dataset: str, dataset_options: dict | None, options: PartitionBase,
                     num_clients: int, seed: int) -> dict:
    params = {
        "version": ARTIFACT_VERSION,
        "dataset": dataset,
        "dataset_options": dataset_options or {},
        "partition": options.model_dump(mode="json", exclude={"seed"}),
        "num_clients": num_clients,
        "seed": seed,
    }
    digest = options.input_digest(dataset)  # only partitions that read files have one
    if digest is not None:
        params["inputs"] = digest
    return params


def partition_id(params: dict) -> str:
    blob = json.dumps(params, sort_keys=True).encode()
    return f"{params['dataset'].lower()}-{params['partition']['name']}-" + (
        hashlib.sha256(blob).hexdigest()[:12])


def _split_assignment(n: int, ratios: tuple[float, float, float],
                      rng: np.random.Generator) -> torch.Tensor:
    order = rng.permutation(n)
    n_train = round(ratios[0] * n)
    n_val = round(ratios[1] * n)
    assignment = np.full(n, 2, dtype=np.int8)
    assignment[order[:n_train]] = 0
    assignment[order[n_train:n_train + n_val]] = 1
    return torch.from_numpy(assignment)


def build_partition(data: GraphDataset, options: PartitionBase, num_clients: int,
                    seed: int, dataset_options: dict | None = None) -> PartitionArtifact:
    """Split ``data`` into ``num_clients`` clients; deterministic for the same arguments."""
    check_partition_level(options, data.level)
    check_partition_task(options, data.level, data.task, data.name)
    check_flip_length(options, num_clients)
    params = partition_params(data.name, dataset_options, options, num_clients, seed)
    rng = np.random.default_rng(seed)
    plan = (_ratio_plan(data, options, num_clients, seed, rng)
            if isinstance(options, RatioPartition)
            else options.plan(data.graph, item_labels(data), num_clients, seed, rng,
                              data.name))
    if isinstance(options, PublishedSplitOption):
        plan = options.published_roles(plan, data.name, data.level, data.splits)
    perturbed = (_flipped_training_edges(data.graphs, plan, options.edge_flip, rng)
                 if options.edge_flip is not None else [])
    return PartitionArtifact(partition_id(params), params, data.level, plan.client_ids,
                             plan.client_splits, plan.global_test, perturbed,
                             edge_relabel=plan.edge_relabel, public_ids=plan.public_ids,
                             overlap=plan.overlap)


def item_labels(data: GraphDataset) -> torch.Tensor:
    """The label of every node (node level) or graph (graph level) of ``data``."""
    return data.graph.y if data.level == "node" else torch.cat([g.y for g in data.graphs])


def _ratio_plan(data: GraphDataset, options: RatioPartition, num_clients: int, seed: int,
                rng: np.random.Generator) -> SplitPlan:
    """The usual split: a random global test cut, ``options.assign`` on the rest, then each
    client's items split by the train/val/test ratios."""
    labels = item_labels(data)
    order = rng.permutation(len(labels))
    n_test = round(options.global_test * len(labels))
    global_test = torch.as_tensor(np.sort(order[:n_test]), dtype=torch.long)
    pool = torch.as_tensor(np.sort(order[n_test:]), dtype=torch.long)
    if data.level == "node":
        parts = options.assign(labels[pool], _pool_graph(data.graph, pool, n_test), num_clients,
                               seed)
    else:
        parts = options.assign(labels[pool], None, num_clients, seed)
    client_ids = [pool[p] for p in parts]
    client_splits = [_split_assignment(len(ids), options.split, rng) for ids in client_ids]
    return SplitPlan(global_test, client_ids, client_splits)


def _pool_graph(graph: Data, pool: torch.Tensor, n_test: int) -> Data:
    """The graph the partition splits: ``graph`` less its global test nodes. Without a global
    test that is ``graph``'s own edge list, not a relabelled copy (1.6 GB at ten million
    nodes, held while METIS runs)."""
    edge_index = (graph.edge_index if n_test == 0 else
                  subgraph(pool, graph.edge_index, relabel_nodes=True,
                           num_nodes=graph.num_nodes)[0])
    return Data(edge_index=edge_index, num_nodes=len(pool))


def _flipped_training_edges(graphs: list[Data], plan: SplitPlan, edge_flip: float | list[float],
                            rng: np.random.Generator) -> list[dict[int, torch.Tensor]]:
    """Per client, the flipped edge lists of its training graphs (FGFL's quality tiers)."""
    ratios = edge_flip if isinstance(edge_flip, list) else [edge_flip] * len(plan.client_ids)
    perturbed = []
    for ids, splits, ratio in zip(plan.client_ids, plan.client_splits, ratios, strict=True):
        flips = {}
        for position in torch.nonzero(splits == TRAIN).view(-1).tolist():
            g = graphs[int(ids[position])]
            flips[position] = flip_edges(g.edge_index, g.num_nodes, ratio, rng)
        perturbed.append(flips)
    return perturbed


def load_or_build_partition(data: GraphDataset, options: PartitionBase, num_clients: int,
                            seed: int, dataset_options: dict | None = None) -> PartitionArtifact:
    """Reuse the saved artifact for these exact parameters, or build and save it."""
    params = partition_params(data.name, dataset_options, options, num_clients, seed)
    path = artifact_path(partition_id(params))
    if path.exists():
        artifact = safe_load(path, "partition artifact", [PartitionArtifact],
                             remedy="delete it and graphfed builds it again")
        if artifact.params == params:
            return artifact
    artifact = build_partition(data, options, num_clients, seed, dataset_options)
    save_to_cache(artifact, path, f"partition {artifact.id}")
    return artifact


def artifact_path(artifact_id: str) -> Path:
    return cache_dir() / "partitions" / f"{artifact_id}.pt"


def _node_client(graph: Data, ids: torch.Tensor, splits: torch.Tensor) -> NodeClient:
    edge_index, _ = subgraph(ids, graph.edge_index, relabel_nodes=True, num_nodes=graph.num_nodes)
    touching = torch.zeros(graph.num_nodes, dtype=torch.bool)
    touching[ids] = True
    incident = int((touching[graph.edge_index[0]] | touching[graph.edge_index[1]]).sum())
    return _client_of(graph, ids, splits, edge_index, incident - edge_index.size(1))


def _client_of(graph: Data, ids: torch.Tensor, splits: torch.Tensor, edge_index: torch.Tensor,
               lost_edges: int) -> NodeClient:
    """The client holding ``graph``'s nodes ``ids`` (split codes ``splits``) and its own edges
    ``edge_index`` (numbered by position in ``ids``)."""
    sub = Data(x=graph.x[ids], edge_index=edge_index, y=graph.y[ids])
    for code, name in enumerate(SPLITS):
        setattr(sub, f"{name}_mask", splits == code)
    return NodeClient(sub, ids, lost_edges=lost_edges)


def _node_clients(graph: Data, client_ids: list[torch.Tensor],
                  client_splits: list[torch.Tensor]) -> list[NodeClient]:
    """Every client's induced subgraph. Where no node belongs to two clients, one pass over the
    edges serves them all (each edge kept by the client owning both ends, in the graph's edge
    order, as ``subgraph`` keeps it): per client only its own nodes and edges are touched, not
    the whole graph, which matters for 10,000 clients of a 10-million-node graph."""
    sizes = [len(ids) for ids in client_ids]
    owner = torch.full((graph.num_nodes,), -1, dtype=torch.long)
    owner[torch.cat(client_ids)] = torch.repeat_interleave(
        torch.arange(len(client_ids)), torch.tensor(sizes))
    if int((owner >= 0).sum()) != sum(sizes):  # overlapping clients: one subgraph each
        return [_node_client(graph, ids, splits)
                for ids, splits in zip(client_ids, client_splits, strict=True)]
    position = torch.empty(graph.num_nodes, dtype=torch.long)
    for ids in client_ids:
        position[ids] = torch.arange(len(ids))
    src, dst = owner[graph.edge_index[0]], owner[graph.edge_index[1]]
    inside = (src == dst) & (src >= 0)
    counts = torch.bincount(src[inside], minlength=len(client_ids))
    incident = (torch.bincount(src[src >= 0], minlength=len(client_ids))
                + torch.bincount(dst[dst >= 0], minlength=len(client_ids)) - counts)
    kept = inside.nonzero().view(-1)
    kept = kept[torch.sort(src[kept], stable=True).indices]
    edges = position[graph.edge_index[:, kept]].split(counts.tolist(), dim=1)
    lost = (incident - counts).tolist()
    return [_client_of(graph, *client) for client in
            zip(client_ids, client_splits, edges, lost, strict=True)]


def _graph_client(graphs: list[Data], ids: torch.Tensor, splits: torch.Tensor,
                  flips: dict[int, torch.Tensor]) -> GraphClient:
    by_split: dict[str, list[Data]] = {s: [] for s in SPLITS}
    id_split: dict[str, list[int]] = {s: [] for s in SPLITS}
    for position, (gid, code) in enumerate(zip(ids.tolist(), splits.tolist(), strict=True)):
        g = graphs[gid]
        if position in flips:
            g = Data(x=g.x, edge_index=flips[position], y=g.y, num_nodes=g.num_nodes)
        by_split[SPLITS[code]].append(g)
        id_split[SPLITS[code]].append(gid)
    return GraphClient(by_split, {s: torch.tensor(v, dtype=torch.long) for s, v in
                                  id_split.items()})


def materialize(data: GraphDataset, artifact: PartitionArtifact) -> FederatedData:
    """Rebuild the clients (and global test set) that ``artifact`` describes from ``data``."""
    test_ids = artifact.global_test_ids
    if data.level == "node":
        graph = (data.graph if artifact.edge_relabel is None  # the graph the partition split
                 else renumbered_graph(data.graph, artifact.edge_relabel))
        clients = _node_clients(graph, artifact.client_ids, artifact.client_splits)
        global_test = (_node_client(graph, test_ids, torch.full_like(test_ids, 2))
                       if len(test_ids) else None)
        public_ids = artifact.public_ids
        public = (_node_client(graph, public_ids, torch.full_like(public_ids, TRAIN))
                  if public_ids is not None and len(public_ids) else None)
    else:
        flips = artifact.perturbed_edges or [{} for _ in artifact.client_ids]
        clients = [_graph_client(data.graphs, ids, splits, f)
                   for ids, splits, f in zip(artifact.client_ids, artifact.client_splits,
                                             flips, strict=True)]
        global_test = (_graph_client(data.graphs, test_ids, torch.full_like(test_ids, 2), {})
                       if len(test_ids) else None)
        public = None
    return FederatedData(data.name, data.level, data.num_features, data.num_classes, clients,
                         global_test, artifact.id, public, artifact.overlap)
