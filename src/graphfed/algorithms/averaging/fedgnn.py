"""FedGNN (Wu, Wu, Cao, Huang, Xie, "FedGNN: Federated graph neural network for
privacy-preserving recommendation", 2021) adapted to subgraph node classification, as a FED-PUB
baseline: FedAvg of the GNN, each client's local graph first expanded with its nodes'
neighbours held by other clients, which the server finds by shared node ids and hands over
anonymously.

FedGNN itself (recommendation): a client is a user whose local graph is its user-item
interactions; the server averages the GNN and embedding gradients (clipped, with Laplace noise:
local differential privacy) and, to give every client higher-order structure, matches the
clients' encrypted item ids and sends each user the embeddings of the other users who interacted
with the same items ("neighbouring users"), anonymously; the client adds them to its local graph
and trains the GNN on the expanded graph. Pseudo-interacted items (random items with gradients
of the same distribution) hide which items a user rated in its gradient upload.

Here, a client is a subgraph whose nodes carry features (the GNN's input representation, as a
user's embedding is FedGNN's): in a setup exchange each client sends its nodes' global ids, their
features and its edges (global id pairs); the server matches ids across clients and returns to
each client, for every node it holds, the neighbours that node has at the other clients: one that
the client holds too becomes a new local edge, one it does not hold becomes an anonymous node
(its features only, no id, no label) joined to it. Every round is then FedAvg on the expanded
graph, on which the client also evaluates. The expansion is one hop, as FedGNN's: edges between
two foreign nodes are not sent.

What this adaptation follows, and what it does not. FED-PUB's paper lists FedGNN among its
baselines but its public code (``JinheonBaek/FED-PUB``) holds only FedAvg and FED-PUB, FedAux's
code (``JhuoW/FedAux``) only its own methods, and neither OpenFGL nor FedGTA's code has FedGNN: no
public code shows how FED-PUB ran it, so the matching by shared node id above is FedGNN's own
mechanism (the server matches shared items) carried over, not a port. On a disjoint partition
(FED-PUB's METIS split) no node is held by two clients, nothing is expanded and FedGNN trains as
FedAvg does; the published FedGNN numbers of that protocol differ from FedAvg's, by a mechanism
the sources do not show. The user-embedding LDP and the pseudo-interacted items protect
per-node gradient uploads, which this adaptation does not make (node features are inputs, not
trained embeddings), so neither is built; the server sees the features, edges and ids the
clients send, as in FedGCN's ``dedup_overlaps`` mode.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch
from pydantic import Field
from torch import Tensor

from graphfed.algorithms.averaging.delivered import DeliveringServer, ReceivingClient
from graphfed.algorithms.averaging.fedavg import FedAvgOptions
from graphfed.algorithms.registry import Algorithm, register
from graphfed.data.federated import NodeClient
from graphfed.messages import Message, MessageError, ScalarSpec, TensorSpec
from graphfed.protocol import ClientContext, Setup
from graphfed.training.batches import PreparedNodeClient

FOREIGN = "fedgnn.foreign"  # the anonymous neighbours' features, sent once
EDGES = "fedgnn.edges"  # edges to add, local numbering (foreign node k is n_local + k)
EXPANSION = "fedgnn_expansion"  # ctx.state: the received (foreign, edges)
VIEW = "fedgnn_view"  # ctx.cache: the prepared expanded graph
READY = "fedgnn_ready"


class FedGnnOptions(FedAvgOptions):
    expand: bool = Field(True, description="expand each client's graph with its nodes' "
                         "neighbours at other clients (False: no setup exchange, FedAvg)")


def expansion_for(ids: Tensor, edges: list[Tensor], features: dict[int, Tensor]
                  ) -> tuple[Tensor, Tensor]:
    """What a client holding nodes ``ids`` (global, in its local order) receives: the features
    of its nodes' neighbours it does not hold (sorted by global id, the ids not sent) and the
    edges to add in its local numbering, both directions, each once. ``edges`` are the other
    clients' edges (global id pairs), ``features`` every reported node's features by id."""
    width = next(iter(features.values())).shape[0] if features else 0
    pairs = torch.cat([e for e in edges if e.numel()] or [torch.empty(2, 0, dtype=torch.long)],
                      dim=1)
    pairs = torch.cat([pairs, pairs.flip(0)], dim=1)
    pairs = pairs[:, torch.isin(pairs[0], ids)]
    outside = ~torch.isin(pairs[1], ids)
    foreign = pairs[1, outside].unique()
    order = ids.argsort()
    local = order[torch.searchsorted(ids[order], pairs[0])]
    target = torch.where(outside, len(ids) + torch.searchsorted(foreign, pairs[1]),
                         order[torch.searchsorted(ids[order], pairs[1]).clamp_max(len(ids) - 1)])
    added = torch.stack([local, target]).unique(dim=1)
    rows = [features[int(i)] for i in foreign]
    x = torch.stack(rows) if rows else torch.zeros(0, width)
    return x, added


def expanded_graph(client: PreparedNodeClient, foreign: Tensor, edges: Tensor) -> NodeClient:
    """The client's raw subgraph with the anonymous nodes appended (no label, in no split) and
    the added edges merged into its own."""
    graph = copy.copy(client.graph)
    n, m = graph.num_nodes, len(foreign)
    graph.x = torch.cat([graph.x.float(), foreign.to(graph.x.device, torch.float32)])
    graph.edge_index = torch.cat([graph.edge_index, edges.to(graph.edge_index.device)],
                                 dim=1).unique(dim=1)
    graph.y = torch.cat([graph.y, graph.y.new_zeros(m)])
    for split in ("train", "val", "test"):
        mask = getattr(graph, f"{split}_mask")
        setattr(graph, f"{split}_mask", torch.cat([mask, mask.new_zeros(m)]))
    graph.num_nodes = n + m
    ids = torch.cat([client.global_ids, client.global_ids.new_full((m,), -1)])
    return NodeClient(graph=graph, global_ids=ids)


class FedGnnServer(DeliveringServer):
    """FedAvg, plus the expansion of the setup exchange, sent until the client confirms it."""

    ready_flag = READY
    state_keys = (*DeliveringServer.state_keys, "expansions")
    options: FedGnnOptions

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.expansions: dict[int, tuple[Tensor, Tensor]] = {}

    def configure_setup(self, clients: list[int]) -> dict[int, Message]:
        return {c: Message() for c in clients} if self.options.expand else {}

    def setup_reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        sizes = self.setup.client_sizes
        n = sizes[client].nodes if sizes else -1
        return {"ids": ((n,), torch.long), "features": ((n, -1), torch.float32),
                "edges": ((2, -1), torch.long)}, {}

    def check_setup_reply(self, client: int, message: Message) -> None:
        ids = message.tensors["ids"]
        if message.tensors["features"].shape[0] != len(ids):
            raise MessageError(f"client {client}: ids and feature rows disagree in length")
        if len(ids) and (ids.min() < 0 or len(ids.unique()) != len(ids)):
            raise MessageError(f"client {client}: negative or repeated node ids")
        if not bool(torch.isin(message.tensors["edges"], ids).all()):
            raise MessageError(f"client {client}: an edge leaves the nodes it holds")

    def aggregate_setup(self, replies: dict[int, Message]) -> None:
        widths = {m.tensors["features"].shape[1] for m in replies.values()}
        if len(widths) > 1:
            raise MessageError(f"FedGNN's clients sent features of different widths {widths}")
        features: dict[int, Tensor] = {}
        for c in sorted(replies):  # a node held by several clients: the first holder's row
            for i, row in zip(replies[c].tensors["ids"].tolist(), replies[c].tensors["features"],
                              strict=True):
                features.setdefault(i, row)
        for c in sorted(replies):
            others = [replies[j].tensors["edges"] for j in sorted(replies) if j != c]
            self.expansions[c] = expansion_for(replies[c].tensors["ids"], others, features)

    def payload(self, client: int) -> dict[str, Tensor] | None:
        if client not in self.expansions:
            return None
        foreign, edges = self.expansions[client]
        return {FOREIGN: foreign, EDGES: edges}


class FedGnnClient(ReceivingClient):
    """Sends its ids, features and edges once; trains and evaluates on the expanded graph."""

    ready_flag, held = READY, EXPANSION
    options: FedGnnOptions

    def answer_setup(self, message: Message, ctx: ClientContext) -> Message:
        data = ctx.node_data()
        ids = data.global_ids.long()
        return Message(tensors={"ids": ids, "features": data.graph.x.float(),
                                "edges": ids[data.graph.edge_index]})

    def view(self, message: Message, ctx: ClientContext) -> tuple[Message, ClientContext]:
        """The message without the expansion (kept in state once received) and ``ctx`` showing
        the expanded graph, prepared once per process (cache)."""
        tensors = dict(message.tensors)
        foreign, edges = tensors.pop(FOREIGN, None), tensors.pop(EDGES, None)
        if foreign is not None and edges is not None:
            ctx.state[EXPANSION] = (foreign, edges)
            ctx.cache.pop(VIEW, None)
        if EXPANSION not in ctx.state:
            return message, ctx
        if VIEW not in ctx.cache:
            data = ctx.node_data()
            ctx.cache[VIEW] = PreparedNodeClient(expanded_graph(data, *ctx.state[EXPANSION]),
                                                 ctx.trainer.model, data.x.device,
                                                 data.sampling)
        return Message(tensors=tensors, scalars=message.scalars), replace(ctx,
                                                                          data=ctx.cache[VIEW])


FEDGNN = register(Algorithm(
    "fedgnn", FedGnnServer, FedGnnClient, FedGnnOptions,
    family="averaging",
    paper="Wu et al., arXiv 2021 (FedGNN), as a FED-PUB baseline",
    levels=("node",),
    batched=True,
    description="FedAvg on each client's subgraph expanded with its nodes' neighbours at other "
                "clients, matched by node id at the server and sent anonymously"))
