"""FedGTA (Li, Wu, Zhang, Zhu, Li, Wang, "FedGTA: Topology-aware averaging for federated graph
learning", VLDB 2024): personalised aggregation guided by each client's topology-aware soft
labels. After its local epochs a client:

1. predicts soft labels P = softmax(f(X, A)) for every node of its subgraph, and sets
   Ŷ⁰ = the one-hot labels on its training nodes, P elsewhere;
2. runs K steps of non-parametric label propagation, Ŷᵏ = α·Â·Ŷᵏ⁻¹ + (1 − α)·Ŷ⁰ with Â the
   self-looped, symmetrically normalised adjacency (D̃^(r−1) Ã D̃^(−r), r = 1/2);
3. reads two soft-label matrices off Ŷᴷ: Q = softmax(Ŷᴷ) and the smoothed Q_T =
   softmax(Ŷᴷ/T), both reset to the one-hot labels on the training nodes;
4. sends, with its model, the *mixed moments* of Q over its nodes: for p = 1..M the origin
   moments E_v[Q^p] and the central moments E_v[(Q − E_v Q)^p], per class (M·C numbers each),
   and its *local smoothing confidence* h = Σ_v d_v·(C/e − H(Q_T,v)), the node degrees d_v
   weighting each node's entropy H(q) = −Σ_c q_c log q_c below its bound C/e (so h ≥ 0, and it
   grows as the propagated labels sharpen).

The server, for each client i that replied, accepts the clients j whose moment vectors are
similar, cos(m_i, m_j) > γ (i itself always), and sends i the personalised model
θ̄_i = Σ_{j accepted} h_j θ_j / Σ_{j accepted} h_j; the client trains from θ̄_i next round and
deploys it meanwhile.

After the authors' code (``xkLi-Allen/FedGTA``: ``federated/fedgta/``,
``gnn_model/label_propagation.py`` ``NonParaLP``, ``gnn_model/gm.py`` ``compute_moment``), whose
choices are kept where the description above leaves room: LP from the model's softmax on the
non-training nodes, r = 1/2, the degrees without self-loops, ε = 1e-8 inside the logarithm, and
the confidence computed on Q_T, the moments on Q. Where it differs, an option or a note:

* its LP also adds Ŷ⁰ to the training rows after every step (``init_lp_propagate``):
  ``lp_reinject`` (off: the recursion above);
* it starts Ŷ⁰ from the true labels on every node outside the validation and test sets as well
  (those it has no prediction for); here every non-training node starts from its prediction,
  so no held-out label enters;
* its model is GAMLP; FedGTA is model-agnostic and runs the run's ``model`` here;
* its defaults are per dataset (``config.py``: origin moments, M = 13, γ = 0.65 for PubMed;
  hybrid, 20, 0.60 for CiteSeer); the defaults here are OpenFGL's (``flcore/fedgta``: hybrid,
  M = 10, γ = 0.5, K = 5, α = 0.5, T = 20), the protocol of its benchmark.

Bytes: each round a client uploads its model, M·C (hybrid: 2·M·C) moments and one scalar, and
receives its personalised model (nothing before its first reply).
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.algorithms.personalized.network import NetworkServer
from graphfed.algorithms.registry import Algorithm, register
from graphfed.mechanisms.client_network import cosine_similarities, mix
from graphfed.messages import Message, ScalarRange, ScalarSpec, TensorSpec, fit_scalars
from graphfed.models.propagation import weighted_sum
from graphfed.protocol import AlgorithmOptions, ClientContext
from graphfed.tensors import Params
from graphfed.training import Trainer, TrainStats
from graphfed.training.batches import NodeBatch, PreparedNodeClient
from graphfed.training.step import LocalStep

MOMENTS = "fedgta_moments"  # reply tensor: the mixed moments of the propagated soft labels
CONFIDENCE = "fedgta_confidence"  # reply scalar: the local smoothing confidence h
GRAPH = "fedgta_graph"  # ctx.cache: the client's LP operator, degrees and training labels
LOG_EPS = 1e-8  # inside the entropy's logarithm (the code's info_entropy_rev)

MomentType = Literal["origin", "central", "hybrid"]


class FedGTAOptions(AlgorithmOptions):
    lp_steps: int = Field(5, ge=1, description="K, label-propagation steps (code: --lp_prop 5; "
                          "OpenFGL: 5)")
    lp_alpha: float = Field(0.5, ge=0.0, le=1.0, description="α of the LP recursion (code and "
                            "OpenFGL: 0.5)")
    temperature: float = Field(20.0, gt=0.0, description="T of the smoothed soft labels the "
                               "confidence reads (code and OpenFGL: 20)")
    num_moments: int = Field(10, ge=1, description="M, the highest moment order (OpenFGL: 10; "
                             "authors' code: 13 on PubMed, 20 on CiteSeer)")
    moment_type: MomentType = Field(
        "hybrid", description="origin E[Q^p], central E[(Q − EQ)^p], or hybrid (both, the "
        "paper's mixed moments; OpenFGL; authors' code: origin on PubMed, hybrid on CiteSeer)")
    accept: float = Field(0.5, ge=-1.0, le=1.0, description="γ: client i aggregates the clients "
                          "j with cos(m_i, m_j) > γ (OpenFGL: 0.5; authors' code: 0.65 "
                          "PubMed, 0.60 CiteSeer)")
    lp_reinject: bool = Field(False, description="add Ŷ⁰ to the training rows after every LP "
                              "step, as the authors' code does (off: the plain LP recursion)")


def moment_width(options: FedGTAOptions, num_classes: int) -> int:
    """The length of a client's moment vector."""
    kinds = 2 if options.moment_type == "hybrid" else 1
    return kinds * options.num_moments * num_classes


def node_means(x: Tensor) -> Tensor:
    """The mean over rows, as one matrix product (the same bits whatever the thread count)."""
    return (torch.ones(1, len(x), dtype=x.dtype, device=x.device) @ x).view(-1) / len(x)


def mixed_moments(q: Tensor, num_moments: int, kind: MomentType) -> Tensor:
    """For p = 1..M, E_v[q^p] (origin) and/or E_v[(q − E_v q)^p] (central), per column of
    ``q`` (nodes × classes), concatenated (order, then class) into one float64 vector."""
    q = q.to(torch.float64)
    orders = range(1, num_moments + 1)
    parts = []
    if kind in ("origin", "hybrid"):
        parts.append(torch.cat([node_means(q ** p) for p in orders]))
    if kind in ("central", "hybrid"):
        centred = q - node_means(q)
        parts.append(torch.cat([node_means(centred ** p) for p in orders]))
    return torch.cat(parts)


def smoothing_confidence(q: Tensor, degree: Tensor) -> float:
    """h = Σ_v d_v·(C/e + Σ_c q_vc log(q_vc + ε)): the degree-weighted margin of each node's
    entropy below its bound C/e (≥ 0; largest for one-hot rows)."""
    q = q.to(torch.float64)
    margin = q.shape[1] / math.e + (q * torch.log(q + LOG_EPS)).sum(dim=1)
    return float(degree.to(torch.float64) @ margin)


def propagate_labels(y0: Tensor, edge_index: Tensor, edge_weight: Tensor, steps: int,
                     alpha: float, reinject: Tensor | None = None) -> Tensor:
    """K steps of Ŷᵏ = α·Â·Ŷᵏ⁻¹ + (1 − α)·Ŷ⁰ (Â given as weighted edges); with ``reinject`` (a
    0/1 column over the nodes) Ŷ⁰ is added again on those rows after every step."""
    y = y0
    for _ in range(steps):
        y = alpha * weighted_sum(y, edge_index, edge_weight) + (1 - alpha) * y0
        if reinject is not None:
            y = y + reinject * y0
    return y


def aggregation_weights(similarity: Tensor, confidence: Tensor, accept: float) -> Tensor:
    """Row i: over the clients j with similarity_ij > ``accept`` (i itself always), weights
    h_j / Σ h; uniform over them where their confidences are all 0 (edgeless subgraphs)."""
    accepted = (similarity > accept).fill_diagonal_(True).to(torch.float64)
    weights = accepted * confidence.to(torch.float64)[None, :]
    totals = weights.sum(dim=1, keepdim=True)
    weights = torch.where(totals > 0, weights, accepted)
    return weights / weights.sum(dim=1, keepdim=True)


class ClientGraph:
    """What the client's post-processing reads of its subgraph (built once, kept in
    ``ctx.cache``): Â as weighted edges, the node degrees, the training rows and their
    one-hot labels."""

    def __init__(self, data: PreparedNodeClient, num_classes: int, device: torch.device):
        graph = data.graph
        n = graph.num_nodes
        edges = graph.edge_index.to(device)
        self.edge_index, self.edge_weight = gcn_norm(edges, None, n, add_self_loops=True)
        self.degree = torch.bincount(edges[1], minlength=n).to(torch.float64)
        train = data.index["train"].to(device)
        self.train_rows = torch.zeros(n, 1, device=device)
        self.train_rows[train] = 1.0
        self.labels = torch.zeros(n, num_classes, device=device)  # one-hot on training rows
        self.labels[train] = F.one_hot(data.y[train], num_classes).to(torch.float32)
        self.nodes = torch.arange(n, device=device)

    def with_train_labels(self, q: Tensor) -> Tensor:
        """``q`` with its training rows replaced by the one-hot labels."""
        return q * (1 - self.train_rows) + self.labels


def full_graph_logits(trainer: Trainer, params: Params, data: PreparedNodeClient,
                      nodes: Tensor) -> Tensor:
    """The model's logits for every node of the client's subgraph, in evaluation mode."""
    trainer.model.eval()
    with torch.no_grad():
        return trainer.forward(params, NodeBatch(data.x, data.edge_index, data.edge_weight,
                                                 data.y, nodes))


class FedGTAServer(NetworkServer):
    """Weighs client j into client i's model by h_j among the clients with similar moments."""

    options: FedGTAOptions

    def reply_spec(self, client: int) -> tuple[TensorSpec, ScalarSpec]:
        spec, _ = super().reply_spec(client)
        width = moment_width(self.options, self.setup.num_classes)
        return ({**spec, MOMENTS: ((width,), torch.float32)},
                fit_scalars({CONFIDENCE: ScalarRange(0.0)}))

    def network(self, clients: list[int], models: list[Params], sizes: Tensor,
                replies: list[Message]) -> Tensor:
        moments = torch.stack([r.tensors[MOMENTS].to(torch.float64) for r in replies])
        confidence = torch.tensor([float(r.scalars[CONFIDENCE]) for r in replies],
                                  dtype=torch.float64)
        return aggregation_weights(cosine_similarities(moments), confidence,
                                   self.options.accept)

    def messages(self, models: list[Params], weights: Tensor) -> list[dict[str, Tensor]]:
        return mix(models, weights)


class FedGTAClient(PersonalClient):
    """Trains from its personalised model, then uploads the model with its LP statistics."""

    options: FedGTAOptions

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        return message.tensors or params

    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep | None:
        return LocalStep(self.current(message, ctx))

    def statistics(self, params: Params, ctx: ClientContext) -> tuple[Tensor, float]:
        """The moment vector (float32) and smoothing confidence of the trained ``params``."""
        data = ctx.data
        assert isinstance(data, PreparedNodeClient)  # FedGTA's levels are node only
        o = self.options
        g = ctx.cache.get(GRAPH)
        if g is None:
            g = ctx.cache[GRAPH] = ClientGraph(data, self.setup.num_classes, ctx.trainer.device)
        predicted = F.softmax(full_graph_logits(ctx.trainer, params, data, g.nodes), dim=1)
        y0 = g.with_train_labels(predicted)
        y = propagate_labels(y0, g.edge_index, g.edge_weight, o.lp_steps, o.lp_alpha,
                             g.train_rows if o.lp_reinject else None)
        q = g.with_train_labels(F.softmax(y, dim=1))
        q_smooth = g.with_train_labels(F.softmax(y / o.temperature, dim=1))
        moments = mixed_moments(q, o.num_moments, o.moment_type).to(torch.float32)
        return moments, smoothing_confidence(q_smooth, g.degree)

    def finish_step(self, message: Message, ctx: ClientContext, params: Params,
                    stats: TrainStats) -> Message:
        ctx.state["params"] = params
        moments, confidence = self.statistics(params, ctx)
        return self.reply({**params, MOMENTS: moments}, ctx, stats, **{CONFIDENCE: confidence})

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        return self.fit_by_step(message, ctx)


FEDGTA = register(Algorithm(
    "fedgta", FedGTAServer, FedGTAClient, FedGTAOptions,
    family="personalized",
    paper="Li et al., VLDB 2024 (FedGTA)",
    levels=("node",),
    batched=True,
    description="personalised aggregation: each client's model mixes the clients with "
                "similar label-propagation moments, weighted by their smoothing confidence"))
