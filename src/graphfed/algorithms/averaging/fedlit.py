"""FedLit (Xie, Xiong, Yang, "Federated node classification over graphs with latent link-type
heterogeneity", WWW 2023), a FedSpray baseline: edges of a client's graph belong to K latent link
types, found by EM clustering of edge embeddings around K edge prototypes; a multi-channel GNN
(``graphfed.models.link_type_gnn``) passes messages over each type's edges in its own channel.

Each round, as the authors' code (``Oxfordblue7/FedLIT:src/models/{client,server}.py``):

* the client takes the global model and prototypes (in round 1, with no global prototypes yet,
  it seeds its own by k-means++ on its edges: ``graphfed.models.link_types``); runs
  ``em_iterations`` EM iterations on the edge embeddings of the received projection (the
  forward pass, which assigns the edges, reads the prototypes of the last E-step); trains
  the whole model for the local epochs; uploads the model with the last M-step's prototypes and
  the number of training nodes each channel reached;
* the server matches each client's prototypes to the global ones, one-to-one by cosine
  similarity (round 1: to the first client's), reorders the client's channels to the global
  order (``graphfed.mechanisms.channel_alignment``), averages the projection and the classifier
  as FedAvg does (by training-set size unless ``weighted=false``, under the run's ``aggregation``
  rule), each channel over the client channels matched to it that saw a training node, and the
  prototypes uniformly.

The client deploys, and is evaluated on, the model it downloads: the code's client copies the
global weights and prototypes into its own channel order, which computes exactly what the
global model computes, so here it takes them in the global order.

The code runs its EM iterations once per local epoch (its default is one epoch a round); here
``em_iterations`` run once a round, before the local epochs.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field

from graphfed.algorithms.averaging.fedavg import FedAvgOptions, FedAvgServer
from graphfed.algorithms.registry import Algorithm, RunView, register
from graphfed.mechanisms.channel_alignment import (
    align_channels,
    average_channels,
    channel_order,
    channel_weights,
)
from graphfed.messages import Message, MessageError, ScalarSpec, TensorSpec, fit_scalars, spec_of
from graphfed.models.gnn import ModelOptions
from graphfed.models.link_type_gnn import (
    CHANNEL_LAYERS,
    PROTOTYPES,
    LinkTypeGNN,
    is_channel_parameter,
    node_projection,
)
from graphfed.models.link_types import assign_link_types, kmeans_plus_plus, prototype_means
from graphfed.protocol import Client, ClientContext, Setup
from graphfed.tensors import Params

CHANNEL_SAMPLES = "channel_samples"  # reply: training nodes each channel reached (K, int64)


class FedLitOptions(FedAvgOptions):
    link_types: int = Field(
        4, ge=1, description="K, the number of latent link types (channels). RECONSTRUCTED: "
        "FedSpray does not say which K its FedLit ran; 4 is the FedLIT code's default "
        "(--nlinktype) and FedSpray spec §7.5 S4; any K ≥ 1 is an alternative (K = 1 is a "
        "plain GNN)")
    em_iterations: int = Field(
        1, ge=1, description="EM iterations (E-step, M-step) on the edge embeddings each round. "
        "RECONSTRUCTED: the FedLIT code default (--num_iterEM 1), which it runs once per local "
        "epoch; here once per round, before the local epochs")
    self_loops: bool = Field(
        False, description="add a self-loop to every node in every channel (every node then "
        "takes part in every channel). RECONSTRUCTED: false is the code's (DGL GraphConv on "
        "each type's edge subgraph: a node with no edge of a type gets nothing from its "
        "channel, and an isolated node only the classifier's bias); true is GCN's usual A + I")
    channel_weighting: Literal["uniform", "samples"] = Field(
        "uniform", description="how a global channel averages the client channels matched to "
        "it that reached a training node: uniform (the code's _aggregate_branch) or by that "
        "number of training nodes. RECONSTRUCTED (the paper is not staged here)")


def check_backbone(run: RunView) -> None:
    """FedLit's channels are GCN, SAGE or SGC layers."""
    if run.model.name not in CHANNEL_LAYERS:
        raise ValueError(f"fedlit takes model {', '.join(CHANNEL_LAYERS)} for its channels, "
                         f"not {run.model.name!r}")


def build_link_type_gnn(level: str, in_dim: int, num_classes: int, opts: ModelOptions,
                        method_options: FedLitOptions) -> LinkTypeGNN:
    """Model factory: ``model.hidden``, ``model.layers``, ``model.dropout`` and ``model.name``
    govern, as for every other algorithm (the FedLIT code's own setting is 64 hidden, 2 layers,
    dropout 0.3 in its argparse defaults, 0.5 in its run script)."""
    return LinkTypeGNN(in_dim, num_classes, opts, method_options.link_types,
                       method_options.self_loops)


class FedLitServer(FedAvgServer):
    """Holds the global model and prototypes; aligns each reply's channels before averaging."""

    state_keys = (*FedAvgServer.state_keys, "has_prototypes", "last")
    options: FedLitOptions

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.has_prototypes = False  # until the first replies, clients seed their own
        self.last: dict = {}

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        tensors = (self.params if self.has_prototypes else
                   {k: v for k, v in self.params.items() if k != PROTOTYPES})
        message = Message(tensors=tensors)
        return {c: message for c in clients}

    configure_evaluate = configure_fit

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        k = self.options.link_types
        return {**spec_of(self.params), CHANNEL_SAMPLES: ((k,), torch.int64)}, fit_scalars()

    def check_reply(self, client: int, message: Message) -> None:
        if bool((message.tensors[CHANNEL_SAMPLES] < 0).any()):
            raise MessageError(f"client {client}: negative {CHANNEL_SAMPLES}")

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        if not replies:
            return
        clients = sorted(replies)
        models = [replies[c].tensors for c in clients]
        centers = self.params[PROTOTYPES] if self.has_prototypes else models[0][PROTOTYPES]
        orders = [channel_order(m[PROTOTYPES], centers) for m in models]
        aligned = [align_channels(m, order, is_channel_parameter)
                   for m, order in zip(models, orders, strict=True)]
        counts = torch.stack([m[CHANNEL_SAMPLES][order]
                              for m, order in zip(models, orders, strict=True)])
        weights = channel_weights(counts, self.options.channel_weighting)
        shared = [k for k in self.params if not is_channel_parameter(k)]
        channels = [k for k in self.params if is_channel_parameter(k) and k != PROTOTYPES]
        current = self.params
        self.params = {
            **self.average([{k: m[k] for k in shared} for m in aligned],
                           self.weights(replies), {k: current[k] for k in shared}),
            **average_channels(aligned, weights, current, channels),
            **average_channels(aligned, torch.full_like(weights, 1.0 / len(aligned)), current,
                               [PROTOTYPES]),
        }
        self.params = {k: self.params[k] for k in current}  # the model's own order
        self.has_prototypes = True
        self.last = {"clients": clients, "channel_order": [o.tolist() for o in orders],
                     "channel_weights": weights.tolist()}

    def round_metrics(self) -> dict[str, Any]:
        return self.last


class FedLitClient(Client):
    """Seeds or takes the prototypes, runs EM on its edges, trains, uploads everything."""

    options: FedLitOptions

    def with_prototypes(self, params: Params, ctx: ClientContext) -> Params:
        """``params`` with prototypes: the server's, or (before it has any) k-means++ seeds of
        this client's edge embeddings."""
        if PROTOTYPES in params:
            return params
        generator = torch.Generator().manual_seed(int(torch.randint(2**62, ())))
        h = node_projection(params, ctx.node_data().x)
        seeds = kmeans_plus_plus(h, ctx.node_data().edge_index, self.options.link_types, generator)
        return {**params, PROTOTYPES: seeds}

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        params = self.with_prototypes(message.tensors, ctx)
        edge_index = ctx.node_data().edge_index
        with torch.no_grad():
            h = node_projection(params, ctx.node_data().x)
            prototypes = params[PROTOTYPES]
            for _ in range(self.options.em_iterations - 1):
                types = assign_link_types(h, edge_index, prototypes)
                prototypes = prototype_means(h, edge_index, types, prototypes)
            types = assign_link_types(h, edge_index, prototypes)
            updated = prototype_means(h, edge_index, types, prototypes)
            reached = channel_training_nodes(edge_index, types, ctx.node_data().index["train"],
                                             len(h), self.options.link_types)
        trained, stats = self.local_train({**params, PROTOTYPES: prototypes}, ctx)
        return self.reply({**trained, PROTOTYPES: updated, CHANNEL_SAMPLES: reached}, ctx, stats)

    def evaluated_params(self, message: Message, ctx: ClientContext) -> Params:
        return self.with_prototypes(message.tensors, ctx)


def channel_training_nodes(edge_index: torch.Tensor, types: torch.Tensor,
                           train: torch.Tensor, num_nodes: int, k: int) -> torch.Tensor:
    """How many training nodes each channel reaches (an edge of that type ends at them): the
    code's ``cluster_train_size``."""
    reached = torch.zeros(k, num_nodes, dtype=torch.bool, device=edge_index.device)
    reached[types, edge_index[1]] = True
    return reached[:, train].sum(1).to(torch.int64)


FEDLIT = register(Algorithm(
    "fedlit", FedLitServer, FedLitClient, FedLitOptions,
    family="averaging",
    paper="Xie, Xiong, Yang, WWW 2023 (FedLit)",
    levels=("node",),
    model=build_link_type_gnn,
    check=check_backbone,
    sparse_features=True,
    # its server and its clients list the prototypes at different places of the model, which
    # an optimizer state kept across rounds must survive
    modes={"persistent": ("optimizer.persistent=true",)},
    description="EM-clustered latent link types, one GNN channel each; the server matches the "
                "clients' edge prototypes and averages each channel with those matched to it"))
