"""FGSSL (Huang, Wan, Ye, Du, "Federated graph semantic and structural learning", IJCAI 2023):
FedAvg whose local objective calibrates the local model against the global one it started from,
at the node level (semantics) and at the graph level (structure).

Both terms compare the live local model f(θ_m) on a strongly augmented view of the client's
subgraph with the frozen global model f(θ_g) on a weakly augmented view (edge removal and
feature-column masking; the authors' code: weak 0.3/0.3, strong 0.8/0.5). h denotes the
representation the model's output layer reads (``mechanisms.representation``).

* Federated Node Semantic Contrast (FNSC): for a training node i with label y_i, the global
  representations of the training nodes of its class are its positives P_i, those of the other
  classes its negatives K_i, and with s the cosine similarity

      ℓ_FNSC(i) = −1/|P_i| Σ_{p∈P_i} log( e^{s_ip/τ} / (e^{s_ip/τ} + Σ_{k∈K_i} e^{s_ik/τ}) ),
      s_ij = s(h_i^m, h_j^g),

  averaged over the batch's training nodes: the local node is pulled to the global model's
  nodes of its class and pushed from the others'.
* Federated Graph Structure Distillation (FGSD): each node's similarity distribution over its
  neighbours N(i) in the client's graph, S_i = softmax_{j∈N(i)}( s(h_i, h_j)/ω ), is computed
  under both models, and the global one is distilled into the local one, KL(S_i^g ‖ S_i^m),
  averaged over the nodes that have neighbours.

The local objective is ℓ_CE + λ_s ℓ_FNSC + λ_g ℓ_FGSD; the server is FedAvg's and every client
deploys the global model.

Where the authors' code differs (``wgc-research/fgssl``, ``FLAG.py`` ``FGCLTrainer1``; OpenFGL's
``flcore/fgssl`` ports it): it computes several candidate terms but its loss is
ℓ_CE + 0.1 · ℓ_edge, where ℓ_edge is, for every edge (u, v), the KL divergence (global ‖ local)
between the softmaxes over the output dimensions of |z_u − z_v| / 0.1 with z the logits (OpenFGL
applies it to the hidden representation instead); its node contrast is computed and never added.
``structure=edge_features`` with ``semantic_weight=0``, ``structure_weight=0.1`` and
``temperature_structure=0.1`` runs that loss.

Bytes: exactly FedAvg's.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from graphfed.algorithms.averaging.fedavg import FedAvgClient, FedAvgOptions, FedAvgServer
from graphfed.algorithms.averaging.moon import needs_hidden_representation
from graphfed.algorithms.registry import Algorithm, register
from graphfed.mechanisms.representation import RepresentationTap
from graphfed.messages import Message
from graphfed.protocol import ClientContext
from graphfed.tensors import Params
from graphfed.training import Trainer
from graphfed.training.batches import NodeBatch
from graphfed.training.step import LocalStep


class FgsslOptions(FedAvgOptions):
    semantic_weight: float = Field(
        1.0, ge=0.0, description="λ_s, the weight of ℓ_FNSC (paper: the terms are added; "
        "authors' code: 0, the contrast is computed but not added)")
    structure_weight: float = Field(
        1.0, ge=0.0, description="λ_g, the weight of the structure term (paper: added; "
        "authors' code: 0.1)")
    structure: Literal["neighbours", "edge_features"] = Field(
        "neighbours", description="the structure term: neighbours, the paper's FGSD (similarity "
        "distributions over each node's neighbours), or edge_features, the authors' code's "
        "(per edge, a distribution over the logit dimensions of |z_u - z_v|)")
    temperature_semantic: float = Field(0.1, gt=0.0, description="τ of ℓ_FNSC (code: 0.1)")
    temperature_structure: float = Field(0.1, gt=0.0, description="ω of the structure term "
                                         "(code: 0.1)")
    weak_edges: float = Field(0.3, ge=0.0, lt=1.0, description="edge removal rate of the "
                              "global model's weak view (code: 0.3)")
    weak_features: float = Field(0.3, ge=0.0, lt=1.0, description="feature-column masking "
                                 "rate of the weak view (code: 0.3)")
    strong_edges: float = Field(0.8, ge=0.0, lt=1.0, description="edge removal rate of the "
                                "local model's strong view (code: 0.8)")
    strong_features: float = Field(0.5, ge=0.0, lt=1.0, description="feature-column masking "
                                   "rate of the strong view (code: 0.5)")


def augment(batch: NodeBatch, edge_rate: float, feature_rate: float) -> NodeBatch:
    """``batch`` with each directed edge removed with probability ``edge_rate`` and each
    feature column zeroed with probability ``feature_rate`` (the code's EdgeRemoving and
    FeatureMasking), over every node: the loss index becomes every node."""
    keep = torch.rand(batch.edge_index.shape[1], device=batch.x.device) >= edge_rate
    columns = torch.rand(batch.x.shape[1], device=batch.x.device) >= feature_rate
    weight = None if batch.edge_weight is None else batch.edge_weight[keep]
    return NodeBatch(batch.x * columns.to(batch.x.dtype), batch.edge_index[:, keep], weight,
                     batch.y, torch.arange(len(batch.y), device=batch.x.device))


def semantic_contrast(local: Tensor, global_: Tensor, labels: Tensor, temperature: float
                      ) -> Tensor:
    """ℓ_FNSC averaged over the rows of ``local``: each row against every row of ``global_``,
    those of its label positive, the others negative."""
    sim = F.normalize(local, dim=1) @ F.normalize(global_, dim=1).t() / temperature
    positive = labels.view(-1, 1) == labels.view(1, -1)
    negatives = torch.logsumexp(sim.masked_fill(positive, float("-inf")), dim=1, keepdim=True)
    log_ratio = sim - torch.logaddexp(sim, negatives)
    per_row = -(log_ratio * positive).sum(1) / positive.sum(1)
    return per_row.mean()


def _neighbour_log_softmax(score: Tensor, source: Tensor, num_nodes: int) -> Tensor:
    """Log-softmax of per-edge ``score`` over the edges of each source node, summed in a fixed
    order (``index_add``, read back with ``F.embedding``) so the bits do not depend on the
    thread count."""
    top = torch.full((num_nodes,), float("-inf"), device=score.device, dtype=score.dtype)
    top = top.scatter_reduce(0, source, score.detach(), "amax")
    shifted = score - F.embedding(source, top.view(-1, 1)).view(-1)
    total = torch.zeros(num_nodes, device=score.device, dtype=score.dtype)
    total = total.index_add(0, source, shifted.exp())
    return shifted - F.embedding(source, total.view(-1, 1)).view(-1).log()


def structure_distillation(local: Tensor, global_: Tensor, edge_index: Tensor,
                           temperature: float) -> Tensor:
    """ℓ_FGSD: KL(S_i^g ‖ S_i^m) of the neighbour-similarity distributions, averaged over the
    nodes with at least one neighbour."""
    if edge_index.shape[1] == 0:
        return local.sum() * 0.0
    source, target = edge_index
    num_nodes = len(local)

    def log_distribution(h: Tensor) -> Tensor:
        h = F.normalize(h, dim=1)
        score = (F.embedding(source, h) * F.embedding(target, h)).sum(1) / temperature
        return _neighbour_log_softmax(score, source, num_nodes)

    log_m, log_g = log_distribution(local), log_distribution(global_).detach()
    kl = (log_g.exp() * (log_g - log_m)).sum()
    return kl / torch.unique(source).numel()


def edge_feature_distillation(local: Tensor, global_: Tensor, edge_index: Tensor,
                              temperature: float) -> Tensor:
    """The authors' code's structure term: per edge, KL(global ‖ local) of the softmaxes over
    the dimensions of |z_u − z_v| / ω, averaged over the edges."""
    if edge_index.shape[1] == 0:
        return local.sum() * 0.0
    source, target = edge_index

    def log_distribution(z: Tensor) -> Tensor:
        gap = (F.embedding(source, z) - F.embedding(target, z)).abs()
        return F.log_softmax(gap / temperature, dim=1)

    log_m, log_g = log_distribution(local), log_distribution(global_).detach()
    return (log_g.exp() * (log_g - log_m)).sum() / edge_index.shape[1]


class Calibration:
    """λ_s ℓ_FNSC + λ_g ℓ_structure as the trainer's hooks: ``targets`` (``on_batch``) draws
    the two views of the batch about to train and runs the frozen global model on the weak one;
    the term (``extra_loss``) runs the live model on the strong one."""

    def __init__(self, trainer: Trainer, tap: RepresentationTap, global_params: Params,
                 options: FgsslOptions):
        self.trainer, self.tap = trainer, tap
        self.global_params = global_params
        self.options = options
        self.batch: NodeBatch | None = None
        self.strong: NodeBatch | None = None
        self.global_hidden = self.global_logits = torch.empty(0)

    def outputs(self, params: Params, view: NodeBatch) -> tuple[Tensor, Tensor]:
        """(representation, logits) of every node of ``view`` under ``params``."""
        logits = self.trainer.forward(params, view)
        return self.tap.read(), logits

    @torch.no_grad()
    def targets(self, live: Params, batch: object) -> None:
        assert isinstance(batch, NodeBatch)  # a node-level method (its registered levels)
        o = self.options
        self.batch = batch
        weak = augment(batch, o.weak_edges, o.weak_features)
        self.strong = augment(batch, o.strong_edges, o.strong_features)
        model = self.trainer.model
        model.eval()
        try:
            self.global_hidden, self.global_logits = self.outputs(self.global_params, weak)
        finally:
            model.train()

    def __call__(self, live: Params) -> Tensor:
        assert self.batch is not None and self.strong is not None  # on_batch ran first
        o, batch = self.options, self.batch
        hidden, logits = self.outputs(live, self.strong)
        term = hidden.sum() * 0.0
        if o.semantic_weight:
            term = term + o.semantic_weight * semantic_contrast(
                F.embedding(batch.index, hidden), self.global_hidden[batch.index],
                batch.targets, o.temperature_semantic)
        if o.structure_weight:
            if o.structure == "neighbours":
                distance = structure_distillation(hidden, self.global_hidden, batch.edge_index,
                                                  o.temperature_structure)
            else:
                distance = edge_feature_distillation(logits, self.global_logits,
                                                     batch.edge_index, o.temperature_structure)
            term = term + o.structure_weight * distance
        return term


class FgsslClient(FedAvgClient):
    """Trains the received global model with the calibration terms against a frozen copy."""

    options: FgsslOptions

    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep | None:
        return None  # the terms read representations of augmented views: not a standard step

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        o = self.options
        if not (o.semantic_weight or o.structure_weight):  # FedAvg's local training
            params, stats = self.local_train(message.tensors, ctx)
            return self.reply(params, ctx, stats)
        trainer = ctx.trainer
        with RepresentationTap(trainer.model) as tap:
            term = Calibration(trainer, tap, message.tensors, o)
            params, stats = trainer.train(message.tensors, ctx.data, self.setup.local_epochs,
                                          self.setup.batch_size, term, memory=ctx.state,
                                          on_batch=term.targets)
        return self.reply(params, ctx, stats)


FGSSL = register(Algorithm(
    "fgssl", FedAvgServer, FgsslClient, FgsslOptions,
    family="averaging",
    paper="Huang et al., IJCAI 2023 (FGSSL)",
    levels=("node",),
    check=needs_hidden_representation("fgssl"),
    description="FedAvg whose local training contrasts node representations with the global "
                "model's same- and other-class nodes and distils its neighbour-similarity "
                "distributions"))
