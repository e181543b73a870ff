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

Overlapping clients. FedGCN assumes each node has one owner; FedEgo's overlapping sampler
(``partition=major_labels``, ``partition.overlap=true``) and FairGFL's partition give a node to
several clients, each holding the subgraph its nodes induce. An edge (u, v) then lies at every
client holding both ends, m(u, v) of them, and the default setup sums it m(u, v) times into u's
total and its count: S_u = sum_v m(u, v) x_v, D_u = sum_v m(u, v), so neighbours that several
clients share weigh more in x~_u. Per-node sums cannot be undone, since which neighbour a sum
came from is gone. ``dedup_overlaps`` counts every edge once: each client sends, keyed by global
id, its nodes' features and its edges (global id pairs, 2 x 8 B each) instead of the sums; the
server takes the union of the edges (an edge reported by several clients once) and sums over it.
The server thus sees the raw features and the union graph: more than the per-node sums it sees
by default. The alternative that keeps features at the clients needs a second setup exchange,
which the protocol does not have (ids up, then each edge's holder count down, then the sums
weighted by 1 / m(u, v) up). Measured on Cora, 4 clients of that sampler with client_size 0.4:
1,736 of the 7,062 directed edges the clients hold lie at 2 to 4 clients, 2,183 of the 4,332
(client, node) rows get an inflated count by default, and the setup upload grows from 24.88 MB
to 25.01 MB with dedup (the feature rows cost what the sums did; the edges replace the counts).

Secure aggregation (``secure_aggregation.enabled``). The setup exchange then has a public part
and a summed one (``SumsSetup``). Public: each client sends its nodes' global ids (which nodes
a client holds stays visible, as in FedGCN), its feature width and the power of two above its
largest neighbour sum or count (``magnitude``); the server takes N, one more than the largest
id, and the bound 2**max(magnitude). Summed: each client answers with a dense [N, F + 1] matrix,
its sums and counts at the rows of its nodes and zeros elsewhere, and SecAgg+ reveals only the
total (``runtime.secagg``), quantised within the bound: each entry is off by less than
N_clients * 2 * bound / 2**quantization_bits; the counts, integers, are rounded back exactly.
The server learns the ids, each client's magnitude (one power of two) and the per-node totals,
never one client's sums. The fit replies are masked as FedAvg's are; a client whose update was
summed has received its totals. ``dedup_overlaps`` needs each client's edges, which no sum
gives: it is refused with secure aggregation.

Simplified versus the paper: no cross-client edges; FedEgo's FedGCN code also never loads the
averaged model back into clients (its "FedGCN" is effectively local training on aggregated
features), which is not reproduced.
"""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import torch
from pydantic import Field
from torch import Tensor

from graphfed.algorithms.averaging.delivered import DeliveringServer, ReceivingClient
from graphfed.algorithms.averaging.fedavg import FedAvgOptions
from graphfed.algorithms.registry import Algorithm, RunView, register
from graphfed.messages import COUNT, Message, MessageError, ScalarRange, ScalarSpec, TensorSpec
from graphfed.models.fedgcn import FedGCNNet, neighbour_mean, neighbour_sums
from graphfed.models.gnn import ModelOptions
from graphfed.privacy.secure_aggregation import SumRequest
from graphfed.protocol import ClientContext, Setup
from graphfed.tensors import Params

FEATURES = "fedgcn_features"
READY = "fedgcn_ready"
VIEW = "fedgcn_view"  # the client's data with the aggregated features, in ctx.cache
# secure aggregation's setup: the public reply's scalars, the summed request's and answer's
MAGNITUDE, WIDTH, NODES, ROWS = "magnitude", "width", "nodes", "rows"
# the binary exponent of a client's largest entry: a client may only raise the shared bound (a
# maximum), and one beyond 2**60, which no graph's sums reach, is refused at the boundary
EXPONENT = ScalarRange(-60, 60, integer=True)


class FedGCNOptions(FedAvgOptions):
    hops: int = Field(1, ge=0, le=2, description="neighbour-aggregation hops before training "
                      "(0: none, plain FedAvg GCN; 1: FedEgo's code; 2: a second, local hop)")
    dedup_overlaps: bool = Field(
        False, description="count each edge once however many clients hold it: clients send "
        "their nodes' features and edges (global ids) and the server sums over the union of "
        "the edges. False: per-node sums, an edge held by m clients counted m times (see the "
        "module docstring)")


def fedgcn_model(level: str, in_dim: int, num_classes: int, opts: ModelOptions,
                 options: FedGCNOptions) -> FedGCNNet:
    return FedGCNNet(in_dim, num_classes, opts, options.hops)


def check_fedgcn_run(config: RunView) -> None:
    """Refuse ``dedup_overlaps`` with secure aggregation: the union of the edges needs each
    client's edges, which a sum never shows."""
    options = config.algorithm_options()
    if (config.secure_aggregation.enabled and isinstance(options, FedGCNOptions)
            and options.dedup_overlaps):
        raise ValueError("secure_aggregation shows the server only the sum of the clients' "
                         "setup payloads; fedgcn.dedup_overlaps needs each client's own edges "
                         "to count each once: use one or the other")


def union_sums(nodes: Tensor, slot: Tensor, replies: list[Message]) -> tuple[Tensor, Tensor]:
    """Neighbour sums and counts of ``nodes`` (sorted global ids; ``slot`` places the replies'
    ids among them) over the union of the replies' edges, each edge once."""
    features = torch.cat([m.tensors["features"] for m in replies])
    x = torch.zeros(len(nodes), features.size(1)).index_copy_(0, slot, features)
    edges = torch.cat([m.tensors["edges"] for m in replies], dim=1)
    source, target = torch.searchsorted(nodes, edges).unique(dim=1)
    return neighbour_sums(x, torch.stack([source, target]), len(nodes))


class FedGCNServer(DeliveringServer):
    """FedAvg, plus the per-node sums of the setup exchange, sent until the client has them."""

    ready_flag = READY
    state_keys = (*DeliveringServer.state_keys, "totals")
    options: FedGCNOptions

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.totals: dict[int, tuple[Tensor, Tensor]] = {}
        # under secure aggregation, between the public setup replies and the summed ones
        self.held: dict[int, Tensor] = {}
        self.width, self.bound = 0, 1.0

    def configure_setup(self, clients: list[int]) -> dict[int, Message]:
        return {c: Message() for c in clients} if self.options.hops > 0 else {}

    def setup_reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        sizes = self.setup.client_sizes
        n = sizes[client].nodes if sizes else -1  # one row per node the partition gave it
        if self.setup.secure_aggregation is not None:
            return {"ids": ((n,), torch.long)}, {MAGNITUDE: EXPONENT, WIDTH: COUNT}
        if self.options.dedup_overlaps:
            return {"ids": ((n,), torch.long), "features": ((n, -1), torch.float32),
                    "edges": ((2, -1), torch.long)}, {}
        return {"ids": ((n,), torch.long), "sums": ((n, -1), torch.float32),
                "counts": ((n,), torch.float32)}, {}

    def check_setup_reply(self, client: int, message: Message) -> None:
        ids = message.tensors["ids"]
        if len(ids) and (ids.min() < 0 or len(ids.unique()) != len(ids)):
            raise MessageError(f"client {client}: negative or repeated node ids")
        if self.setup.secure_aggregation is not None:  # the public part: ids alone
            return
        rows = message.tensors["features" if "features" in message.tensors else "sums"]
        if rows.shape[0] != len(ids):
            raise MessageError(f"client {client}: ids and per-node rows disagree in length")
        if "counts" in message.tensors:
            counts = message.tensors["counts"]
            if counts.shape != ids.shape or (len(ids) and counts.min() < 0):
                raise MessageError(f"client {client}: neighbour counts of the wrong length "
                                   "or negative")
        elif not bool(torch.isin(message.tensors["edges"], ids).all()):
            raise MessageError(f"client {client}: an edge leaves the nodes it holds")

    def aggregate_setup(self, replies: dict[int, Message]) -> None:
        if not replies:
            return
        if self.setup.secure_aggregation is not None:  # the public part; the sums come next
            widths = {int(m.scalars[WIDTH]) for m in replies.values()}
            if len(widths) > 1:
                raise MessageError(f"FedGCN's clients have different feature widths {widths}")
            self.held = {c: m.tensors["ids"] for c, m in sorted(replies.items())}
            self.width = widths.pop()
            self.bound = 2.0 ** max(int(m.scalars[MAGNITUDE]) for m in replies.values())
            return
        rows = "features" if self.options.dedup_overlaps else "sums"
        widths = {m.tensors[rows].shape[1] for m in replies.values()}
        if len(widths) > 1:
            raise MessageError(f"FedGCN's clients sent {rows} of different widths {widths}")
        clients = list(replies)
        ids = torch.cat([replies[c].tensors["ids"] for c in clients])
        nodes, slot = torch.unique(ids, return_inverse=True)
        if self.options.dedup_overlaps:
            sums, counts = union_sums(nodes, slot, [replies[c] for c in clients])
        else:
            sums = torch.zeros(len(nodes), widths.pop())
            sums.index_add_(0, slot, torch.cat([replies[c].tensors["sums"] for c in clients]))
            counts = torch.zeros(len(nodes)).index_add_(
                0, slot, torch.cat([replies[c].tensors["counts"] for c in clients]))
        for c, part in zip(clients, slot.split([len(replies[c].tensors["ids"]) for c in clients]),
                           strict=True):
            self.totals[c] = (sums[part], counts[part])

    def configure_setup_sum(self, clients: list[int]) -> SumRequest | None:
        """Each client that sent its ids answers with its dense [N, F + 1] sums and counts."""
        if not self.held:
            return None
        nodes = 1 + max((int(ids.max()) for ids in self.held.values() if len(ids)), default=0)
        request = Message(scalars={NODES: nodes})
        return SumRequest({c: request for c in self.held}, {ROWS: (nodes, self.width + 1)},
                          self.bound)

    def aggregate_setup_sum(self, total: Params, contributors: list[int]) -> None:
        """Each contributor's rows of the total; the counts, integers, rounded back."""
        rows = total[ROWS]
        sums, counts = rows[:, :-1].float(), rows[:, -1].round().float()
        for c in contributors:
            ids = self.held[c]
            self.totals[c] = (sums[ids], counts[ids])
        self.held = {}

    def payload(self, client: int) -> dict[str, Tensor] | None:
        if client not in self.totals:
            return None
        sums, counts = self.totals[client]
        return {f"{FEATURES}.sums": sums, f"{FEATURES}.counts": counts}


class FedGCNClient(ReceivingClient):
    """Sends its per-node neighbour sums once; trains on the features built from the totals."""

    ready_flag, held = READY, FEATURES
    options: FedGCNOptions

    def answer_setup(self, message: Message, ctx: ClientContext) -> Message:
        graph, ids = ctx.node_data().graph, ctx.node_data().global_ids.long()
        if self.options.dedup_overlaps:
            return Message(tensors={"ids": ids, "features": graph.x.float(),
                                    "edges": ids[graph.edge_index]})
        sums, counts = neighbour_sums(graph.x.float(), graph.edge_index, graph.num_nodes)
        if self.setup.secure_aggregation is None:
            return Message(tensors={"ids": ids, "sums": sums, "counts": counts})
        rows = torch.cat([sums, counts.unsqueeze(1)], dim=1).double()
        if NODES not in message.scalars:  # the public part
            largest = float(rows.abs().max()) if rows.numel() else 0.0
            return Message(tensors={"ids": ids},
                           scalars={MAGNITUDE: math.frexp(largest)[1], WIDTH: sums.shape[1]})
        dense = rows.new_zeros(int(message.scalars[NODES]), rows.shape[1])
        return Message(tensors={ROWS: dense.index_copy_(0, ids.to(dense.device), rows)})

    def view(self, message: Message, ctx: ClientContext) -> tuple[Message, ClientContext]:
        """The message without the feature totals (stored once received) and ``ctx`` with the
        client's data showing the aggregated features: one view object, kept in ``ctx.cache``
        while the features stay the same, so that the batched engine finds the layout it
        built for it in an earlier round."""
        tensors = dict(message.tensors)
        sums, counts = tensors.pop(f"{FEATURES}.sums", None), tensors.pop(f"{FEATURES}.counts",
                                                                         None)
        data = ctx.node_data()
        graph, device = data.graph, data.x.device  # the raw graph is kept off the device
        if sums is not None and counts is not None:  # the totals arrive on the client's device
            x = (graph.x.float().to(device) + sums) / (1 + counts).unsqueeze(1)
            edge_index = graph.edge_index.to(device)
            for _ in range(self.options.hops - 1):
                x = neighbour_mean(x, edge_index, graph.num_nodes)
            ctx.state[FEATURES] = x
        if FEATURES not in ctx.state:
            return message, ctx
        view = ctx.cache.get(VIEW)
        if view is None or view.x is not ctx.state[FEATURES]:
            view = ctx.cache[VIEW] = copy.copy(data)
            view.x = ctx.state[FEATURES]
        return Message(tensors=tensors, scalars=message.scalars), replace(ctx, data=view)


FEDGCN = register(Algorithm(
    "fedgcn", FedGCNServer, FedGCNClient, FedGCNOptions,
    family="averaging",
    paper="Yao et al., NeurIPS 2023 (FedGCN)",
    levels=("node",),
    model=fedgcn_model,
    check=check_fedgcn_run,
    batched=True,
    modes={"dedup": ("fedgcn.dedup_overlaps=true",)},
    description="FedAvg of a 2-layer GCN on neighbour features summed across clients before "
                "training"))
