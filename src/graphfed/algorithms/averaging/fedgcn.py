"""FedGCN (Yao, Jin, Ravi, Joe-Wong, NeurIPS 2023, arXiv 2201.12433) as a FedEgo baseline: before
training, the server sums every node's neighbour features over all clients and hands each client
the sums for its nodes; then FedAvg of a 2-layer GCN on the pre-aggregated features.

What FedGCN assumes and what graphfed can give it. In FedGCN each client knows all edges of its
nodes, including those to other clients' nodes (by node id), and sends for every node it touches
sum_{j in its nodes} A_ij x_j; the server (secure) sum therefore covers cross-client edges, and for
2 hops a client also receives the sums of its nodes' cross-client neighbours together with the
edges to them. graphfed's clients hold only their induced subgraph: cross-client edges are gone
(``NodeClient.lost_edges``), so no client can report them and they cannot be recovered inside the
message protocol. What is built, honestly:

* setup exchange (round 0): each client sends, keyed by global node id (the one thing FedGCN lets
  the server see: which nodes a client holds), the sum of its nodes' neighbour features over its
  own edges and the neighbour counts; the server sums them per node id and returns to each client
  the totals for its nodes. A client's features become x~_i = (x_i + S_i) / (1 + D_i), the mean
  over the node and its neighbours in the union of all clients' graphs (D^-1 (A + I) X, the
  row-normalisation FedEgo's code uses). That gains over local aggregation only for nodes held by
  several clients (FedEgo's label-skew split lets training nodes overlap); with a disjoint
  partition (METIS, Louvain) it equals the local aggregation exactly.
* ``hops = 2``: the client applies the same mean once more over its own edges to the received
  1-hop features (the second hop's cross-client edges are unknown to it). ``hops = 0``: no
  exchange; plain FedAvg of the GCN.
* the model: graphfed's 2-layer GCN (config ``model.hidden``, dropout) on x~. Its ``prepare``
  applies the same hop means to any graph it is given locally, so the global test graph (whole)
  is evaluated on features built the same way (FedEgo's code instead tests on raw features).

Simplified versus the paper: no secure aggregation (the server sees the per-node sums), no
cross-client edges; FedEgo's FedGCN code also never loads the averaged model back into clients
(its "FedGCN" is effectively local training on aggregated features), which is not reproduced.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch
from pydantic import Field
from torch import Tensor

from graphfed.algorithms.averaging.fedavg import FedAvgClient, FedAvgOptions, FedAvgServer
from graphfed.algorithms.registry import Algorithm, register
from graphfed.models.fedgcn import FedGCNNet, neighbour_mean, neighbour_sums
from graphfed.models.gnn import ModelOptions
from graphfed.protocol import Message, MessageError

FEATURES = "fedgcn_features"
READY = "fedgcn_ready"


class FedGCNOptions(FedAvgOptions):
    hops: int = Field(1, ge=0, le=2, description="neighbour-aggregation hops before training "
                      "(0: none, plain FedAvg GCN; 1: FedEgo's code; 2: a second, local hop)")


def fedgcn_model(level: str, in_dim: int, num_classes: int, opts: ModelOptions,
                 options: FedGCNOptions) -> FedGCNNet:
    return FedGCNNet(in_dim, num_classes, opts, options.hops)


class FedGCNServer(FedAvgServer):
    """FedAvg, plus the per-node sums of the setup exchange, sent with a client's first message."""

    state_keys = (*FedAvgServer.state_keys, "totals", "ready")

    def __init__(self, setup):
        super().__init__(setup)
        self.totals: dict[int, tuple[Tensor, Tensor]] = {}
        self.ready: set[int] = set()

    def configure_setup(self, clients):
        return {c: Message() for c in clients} if self.setup.options.hops > 0 else {}

    def setup_reply_spec(self, client):
        sizes = self.setup.client_sizes
        n = sizes[client].nodes if sizes else -1  # one row per node the partition gave it
        return {"ids": ((n,), torch.long), "sums": ((n, -1), torch.float32),
                "counts": ((n,), torch.float32)}, ()

    def check_setup_reply(self, client, message):
        ids, sums, counts = (message.tensors[k] for k in ("ids", "sums", "counts"))
        if sums.shape[0] != len(ids) or counts.shape != ids.shape:
            raise MessageError(f"client {client}: ids, sums and counts disagree in length")
        if len(ids) and (ids.min() < 0 or counts.min() < 0 or len(ids.unique()) != len(ids)):
            raise MessageError(f"client {client}: negative or repeated node ids, or negative "
                               "neighbour counts")

    def aggregate_setup(self, replies):
        if not replies:
            return
        widths = {m.tensors["sums"].shape[1] for m in replies.values()}
        if len(widths) > 1:
            raise MessageError(f"FedGCN's clients sent neighbour sums of different widths "
                               f"{widths}")
        clients = list(replies)
        ids = torch.cat([replies[c].tensors["ids"] for c in clients])
        nodes, slot = torch.unique(ids, return_inverse=True)
        sums = torch.zeros(len(nodes), replies[clients[0]].tensors["sums"].size(1))
        sums.index_add_(0, slot, torch.cat([replies[c].tensors["sums"] for c in clients]))
        counts = torch.zeros(len(nodes)).index_add_(
            0, slot, torch.cat([replies[c].tensors["counts"] for c in clients]))
        for c, part in zip(clients, slot.split([len(replies[c].tensors["ids"]) for c in clients]),
                           strict=True):
            self.totals[c] = (sums[part], counts[part])

    def _message(self, client: int, base: Message) -> Message:
        if client not in self.totals or client in self.ready:
            return base
        sums, counts = self.totals[client]
        return Message(tensors={**base.tensors, f"{FEATURES}.sums": sums,
                                f"{FEATURES}.counts": counts})

    def configure_fit(self, rnd, clients):
        base = Message(tensors=self.params)
        return {c: self._message(c, base) for c in clients}

    configure_evaluate = configure_fit

    def aggregate_fit(self, rnd, replies):
        self.ready |= {c for c, m in replies.items() if m.scalars.get(READY)}
        super().aggregate_fit(rnd, replies)


class FedGCNClient(FedAvgClient):
    """Sends its per-node neighbour sums once; trains on the features built from the totals."""

    def answer_setup(self, message, ctx):
        graph = ctx.data.graph
        sums, counts = neighbour_sums(graph.x.float(), graph.edge_index, graph.num_nodes)
        return Message(tensors={"ids": ctx.data.global_ids.long(), "sums": sums,
                                "counts": counts})

    def _with_features(self, message: Message, ctx):
        """The message without the feature totals (stored once received) and ``ctx`` with the
        client's data showing the aggregated features."""
        tensors = dict(message.tensors)
        sums, counts = tensors.pop(f"{FEATURES}.sums", None), tensors.pop(f"{FEATURES}.counts",
                                                                         None)
        graph, device = ctx.data.graph, ctx.data.x.device  # the raw graph is kept off the device
        if sums is not None:  # the totals arrive on the client's device
            x = (graph.x.float().to(device) + sums) / (1 + counts).unsqueeze(1)
            edge_index = graph.edge_index.to(device)
            for _ in range(self.options.hops - 1):
                x = neighbour_mean(x, edge_index, graph.num_nodes)
            ctx.state[FEATURES] = x
        if FEATURES not in ctx.state:
            return message, ctx
        view = copy.copy(ctx.data)
        view.x = ctx.state[FEATURES]
        return Message(tensors=tensors, scalars=message.scalars), replace(ctx, data=view)

    def fit(self, message, ctx):
        message, view = self._with_features(message, ctx)
        reply = super().fit(message, view)
        reply.scalars[READY] = FEATURES in ctx.state
        return reply

    def evaluate(self, message, ctx):
        message, view = self._with_features(message, ctx)
        return super().evaluate(message, view)


FEDGCN = register(Algorithm(
    "fedgcn", FedGCNServer, FedGCNClient, FedGCNOptions,
    family="averaging",
    paper="Yao et al., NeurIPS 2023 (FedGCN)",
    levels=("node",),
    model=fedgcn_model,
    description="FedAvg of a 2-layer GCN on neighbour features summed across clients before "
                "training"))
