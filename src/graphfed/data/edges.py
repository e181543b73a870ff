"""The edge level's data: each client's own edges split into training, validation and test
supervision edges, with the negative pairs its evaluation scores against them.

The node partition runs first, as at the node level (any node-level partition applies): each
client holds its nodes and the edges between them. An edge whose ends went to different
clients (or one end to no client) is held by nobody and is left out, as subgraph federated
learning leaves it (``edge_report`` counts them). Inside each client, ``split_edges`` follows
PyG's ``RandomLinkSplit`` semantics (``is_undirected=True``, ``disjoint_train_ratio=0``),
written here so that it draws from a seeded generator of its own rather than the global RNG:

* the client's edges are taken as undirected pairs (self-loops dropped), shuffled, and cut into
  ``val`` and ``test`` shares (rounded down) and training edges (the rest);
* message passing: training and validation predictions pass messages over the training edges
  only, test predictions over the training and validation edges (``message_passing``); no
  validation or test edge is ever in a training message-passing graph, no test edge in any;
* negatives for validation and test (as many as the split's positives): drawn once per client,
  seeded, distinct undirected pairs that are none of the client's edges (of any split) and none
  of each other; fewer only where the client's graph has fewer non-adjacent pairs;
* training negatives are drawn fresh every epoch by the trainer (``PreparedEdgeClient``), PyG's
  ``negative_sampling`` against the training edges, under the client's seeded round streams;
  with ``loss: full`` none are drawn: training scores every node pair of the client against its
  training adjacency with the diagonal set (``training_adjacency``), GAE's re-weighted
  reconstruction (``graphfed.reconstruction``), for clients of up to ``FULL_LOSS_NODES`` nodes.

The split of a client depends on the partition seed, the client's index and ``EdgeOptions``
only, so every runtime and every process rebuilds the same one.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal

import numpy as np
import torch
from pydantic import BaseModel, Field, model_validator
from torch import Tensor
from torch_geometric.data import Data

from graphfed.data.federated import SPLITS, EdgeClient, EdgeSplit, FederatedData
from graphfed.errors import GraphfedError
from graphfed.validation import OPTIONS

SPLIT_STREAM = 0x6564676573  # "edges": the split's seed stream, apart from the partition's
# pair sets up to this many node pairs (1,448 nodes) draw their negatives from the full list of
# non-adjacent pairs; larger ones by rejection, which touches only what it draws
ENUMERATED_PAIRS = 2**20
# loss: full holds N × N scores, targets and gradients: 20,000 nodes (PubMed's 19,717 fit) is
# 1.6 GB per float32 matrix
FULL_LOSS_NODES = 20_000


class EdgeOptions(BaseModel):
    """How a client splits its edges at the edge level (``level: edge``)."""

    model_config = OPTIONS

    val: float = Field(0.05, ge=0.0, lt=1.0, description="share of a client's edges that are "
                       "validation supervision edges (RandomLinkSplit's num_val)")
    test: float = Field(0.10, ge=0.0, lt=1.0, description="share of a client's edges that "
                        "are test supervision edges (RandomLinkSplit's num_test); the rest "
                        "train")
    train_negatives: float = Field(1.0, gt=0.0, description="negative pairs drawn per "
                                   "training edge, fresh every epoch (loss: sampled)")
    loss: Literal["sampled", "full"] = Field(
        "sampled", description="the training loss: the cross-entropy of the training edges "
        "and train_negatives fresh negatives per edge (sampled), or GAE's re-weighted "
        f"cross-entropy over every node pair of the training graph (full; clients of up to "
        f"{FULL_LOSS_NODES:,} nodes, inner decoder)")

    @model_validator(mode="after")
    def _some_left_to_train(self) -> EdgeOptions:
        if self.val + self.test >= 1.0:
            raise ValueError(f"edges.val + edges.test = {self.val + self.test:g} leaves no "
                             "training edge; keep their sum below 1")
        if self.loss == "full" and self.train_negatives != 1.0:
            raise ValueError("edges.train_negatives draws negatives for edges.loss=sampled; "
                             "edges.loss=full scores every node pair and draws none")
        return self


def pair_keys(pairs: Tensor, num_nodes: int) -> Tensor:
    """One integer per undirected pair: smaller id × nodes + larger id."""
    low, high = pairs.min(0).values, pairs.max(0).values
    return low * num_nodes + high


def undirected_pairs(edge_index: Tensor, num_nodes: int) -> Tensor:
    """The distinct undirected pairs of ``edge_index`` (no self-loops), smaller id first, in
    key order."""
    keys = pair_keys(edge_index[:, edge_index[0] != edge_index[1]], num_nodes).unique()
    return torch.stack([keys // num_nodes, keys % num_nodes])


def split_edges(graph: Data, options: EdgeOptions, generator: torch.Generator) -> EdgeSplit:
    """``graph``'s edges split into supervision pairs and negatives (the module's docstring)."""
    n = int(graph.num_nodes)
    pairs = undirected_pairs(graph.edge_index, n)
    count = pairs.size(1)
    order = torch.randperm(count, generator=generator)
    n_val, n_test = int(options.val * count), int(options.test * count)
    cuts = order.split([n_val, n_test, count - n_val - n_test])
    positive = {"val": pairs[:, cuts[0]], "test": pairs[:, cuts[1]], "train": pairs[:, cuts[2]]}
    negatives = non_edges(n, pair_keys(pairs, n), n_val + n_test, generator)
    n_val_neg = min(n_val, negatives.size(1))
    return EdgeSplit({s: positive[s] for s in SPLITS},
                     {"val": negatives[:, :n_val_neg], "test": negatives[:, n_val_neg:]},
                     options.train_negatives, full_loss=options.loss == "full")


def training_adjacency(split: EdgeSplit, num_nodes: int) -> Tensor:
    """The [N, N] boolean target of ``loss: full``: True at both orders of every training edge
    and on the diagonal (GAE's A + I)."""
    adjacency = torch.eye(num_nodes, dtype=torch.bool)
    edges = split.message_passing("train")
    adjacency[edges[0], edges[1]] = True
    return adjacency


def non_edges(num_nodes: int, forbidden: Tensor, count: int, generator: torch.Generator
              ) -> Tensor:
    """``count`` distinct undirected pairs of distinct nodes whose keys are not in
    ``forbidden`` (as many as there are, if fewer), smaller id first, in the order drawn."""
    total = num_nodes * (num_nodes - 1) // 2
    count = min(count, total - len(forbidden))
    if count <= 0:
        return torch.empty(2, 0, dtype=torch.long)
    if total <= ENUMERATED_PAIRS or total - len(forbidden) < 4 * count:
        low, high = torch.triu_indices(num_nodes, num_nodes, offset=1)
        keys = low * num_nodes + high
        keys = keys[~torch.isin(keys, forbidden)]
        keys = keys[torch.randperm(len(keys), generator=generator)[:count]]
    else:
        keys = _drawn_keys(num_nodes, forbidden, count, generator)
    return torch.stack([keys // num_nodes, keys % num_nodes])


def _drawn_keys(num_nodes: int, forbidden: Tensor, count: int, generator: torch.Generator
                ) -> Tensor:
    """``non_edges`` by rejection: uniform pairs, the forbidden, repeated and self pairs
    dropped, until ``count`` are found (``non_edges`` comes here only where at least four
    times as many pairs are free)."""
    found = torch.empty(0, dtype=torch.long)
    while len(found) < count:
        drawn = torch.randint(num_nodes, (2, 2 * (count - len(found)) + 64), generator=generator)
        drawn = drawn[:, drawn[0] != drawn[1]]
        keys = pair_keys(drawn, num_nodes)
        keys = keys[~torch.isin(keys, forbidden) & ~torch.isin(keys, found)]
        _, first = np.unique(keys.numpy(), return_index=True)
        found = torch.cat([found, keys[np.sort(first)][:count - len(found)]])
    return found


def client_generator(seed: int, client: int) -> torch.Generator:
    """The generator of one client's edge split, from the partition seed and its index."""
    words = np.random.SeedSequence([seed, client, SPLIT_STREAM]).generate_state(2)
    return torch.Generator().manual_seed(int(words[0]) << 32 | int(words[1]))


def edge_clients(data: FederatedData, options: EdgeOptions, seed: int) -> FederatedData:
    """``data``'s node-level clients as edge-level ones, each with its own ``split_edges``."""
    if data.level != "node":
        raise GraphfedError(f"level=edge splits the edges of a node-level dataset; "
                            f"'{data.dataset}' is {data.level}-level")
    if data.global_test is not None:
        raise GraphfedError("level=edge evaluates on each client's own test edges; leave "
                            "partition.global_test unset")
    largest = max(c.num_nodes for c in data.clients)
    if options.loss == "full" and largest > FULL_LOSS_NODES:
        raise GraphfedError(f"edges.loss=full scores all N² node pairs of a client, up to "
                            f"{FULL_LOSS_NODES:,} nodes; a client here has {largest:,}: use "
                            "edges.loss=sampled or more clients")
    clients = [EdgeClient(c.graph, c.global_ids, c.lost_edges,
                          edges=split_edges(c.graph, options, client_generator(seed, i)))
               for i, c in enumerate(data.clients)]
    return replace(data, level="edge", clients=clients)


def edge_report(data: FederatedData, graph: Data) -> dict[str, int | float]:
    """What the edge level kept of ``graph`` (the dataset's whole graph): its undirected
    edges, those held by no client (``edges_lost``, their ends on different clients or one end
    on none) and their share, and every split's supervision edges over all clients."""
    n = int(graph.num_nodes)
    total = undirected_pairs(graph.edge_index, n).size(1)
    held = torch.cat([pair_keys(c.global_ids[undirected_pairs(c.graph.edge_index, c.num_nodes)],
                                n) for c in data.clients]).unique()
    lost = total - len(held)
    report: dict[str, int | float] = {"edges": total, "edges_lost": lost,
                                      "edges_lost_share": lost / total if total else 0.0}
    for split in SPLITS:
        report[f"{split}_edges"] = sum(c.num_samples(split) for c in data.clients)
    return report
