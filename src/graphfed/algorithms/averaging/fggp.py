"""FGGP (Wan, Huang, Ye, "Federated Graph Learning under Domain Shift with Generalizable
Prototypes", AAAI 2024). One global GNN, averaged as FedAvg does, decoupled into a feature
extractor (everything up to the output layer; its output h is the representation the output
layer reads, ``mechanisms.representation``) and a classifier that the method replaces by
prototypes, at two levels:

* **Classification level: clustered prototypes.** Each client uploads, beside its model, its
  class prototypes: confidence-weighted class means of h over every node of its subgraph, a
  training node counting with its label and weight 1, any other node with the class the model
  predicts and the predicted probability as weight (the code's ``get_proto_norm_weighted``).
  For each class the server clusters the clients' prototypes with FINCH (cosine,
  ``mechanisms.finch``) and keeps one mean per cluster, so a class seen in several domains
  keeps several prototypes. A node is classified by its nearest clustered prototype (cosine);
  the authors' code votes over the k nearest prototypes of a memory queue (``use_knn``).
* **Feature-extractor level: injected global knowledge and prototype contrast.** Before local
  training the client embeds its subgraph with the received global model and links every node
  to its k most similar nodes (cosine, the code's ``kneighbors_graph``, k = ``neighbours``); the
  local graph with these edges added is a second view. Local training minimises

      L = CE(view 1) + CE(view 2) + lam_pa * L_PA + lam_cpc * L_CPC

  where L_PA contrasts the class prototypes of the two views (positive: the same class in the
  other view; negatives: the other classes in both views; cosine over temperature tau_pa, the
  code's ``proto_align_loss``) and L_CPC pulls each training node's h towards its class's
  clustered global prototypes against all the others,
  -log(sum_pos exp(cos/tau) / sum_all exp(cos/tau)) (the cluster-prototype InfoNCE of the FPL
  code FGGP's code builds on, temperature ``infoNCET``).

Paper versus the authors' code (``GuanchengWan/FGGP`` ``models/fggp.py``; OpenFGL's
``flcore/fggp``), and what is simplified here:

* the authors' code computes no L_CPC (its branch is ``pass``): ``lam_cpc=0`` runs the code's
  objective; the default 1 keeps the contrast with the clustered global prototypes;
* the code learns the second view's adjacency with a GAug-style edge augmentor (an extra GNN
  whose sampled adjacency, half its own edge scores and half the union graph, is trained to
  reconstruct the union graph); here the second view is the union graph itself, and the kNN
  edges are symmetrised;
* the code rebuilds the kNN graph every ``knn_frequence`` rounds (10-20); OpenFGL and this
  module every round, from the model each client receives;
* pseudo-labels and weights inside L_PA come from the received global model (once per round;
  the code re-reads them from each step's logits); the uploaded prototypes come from the
  trained model in evaluation mode (OpenFGL's ``send_message``);
* the code keeps the output layer personal when it classifies by prototypes (``personal``);
  here the whole model is averaged, as OpenFGL does. ``predict=head`` scores the output layer
  (OpenFGL's evaluation).

Node level only, as both codes: the kNN view is a node graph.
"""

from __future__ import annotations

import copy
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor
from torch.func import functional_call
from torch_geometric.utils import coalesce

from graphfed.algorithms.averaging.fedavg import FedAvgClient, FedAvgOptions, FedAvgServer
from graphfed.algorithms.registry import Algorithm, RunView, register
from graphfed.data.federated import NodeClient
from graphfed.mechanisms.finch import cluster_means, finch
from graphfed.mechanisms.prototypes import member_means
from graphfed.mechanisms.representation import RepresentationTap
from graphfed.messages import Message, MessageError, ScalarSpec, TensorSpec, fit_scalars, spec_of
from graphfed.protocol import ClientContext, Setup
from graphfed.tensors import Params
from graphfed.training import PreparedClient, Trainer
from graphfed.training.batches import NodeBatch, PreparedNodeClient
from graphfed.training.step import LocalStep
from graphfed.training.trainer import SplitMetrics

PROTOTYPES = "prototypes"  # fit reply: [C, d] the client's class prototypes; to clients: [M, d]
WEIGHTS = "prototype_weights"  # fit reply: [C] each class's summed node weight (0: absent)
LABELS = "prototype_labels"  # to clients: [M] the class of each clustered prototype
EXTRA = (PROTOTYPES, WEIGHTS, LABELS)
KNN_CHUNK = 4096  # rows of the similarity matrix held at once


class FGGPOptions(FedAvgOptions):
    neighbours: int = Field(3, ge=1, description="k of the kNN graph built from the global "
                            "model's embeddings (the code's neibor: 3; 1 on arxiv)")
    lam_pa: float = Field(1.0, ge=0.0, description="weight of L_PA, the two-view prototype "
                          "contrast (the code: 1)")
    tau_pa: float = Field(0.5, gt=0.0, description="temperature of L_PA (the code: 0.5)")
    lam_cpc: float = Field(1.0, ge=0.0, description="weight of L_CPC, the contrast with the "
                           "clustered global prototypes (1; the authors' code leaves it out: 0)")
    tau_cpc: float = Field(0.02, gt=0.0, description="temperature of L_CPC (the code's "
                           "infoNCET: 0.02)")
    predict: Literal["prototype", "head"] = Field(
        "prototype", description="a node's prediction: its nearest clustered global prototype "
        "(cosine; the paper's classifier-free prediction) or the output layer (OpenFGL's)")


def representation_width(params: Params) -> int:
    """The width of the representation the output layer reads: the input width of the last
    layer's first matrix (a GCN, SAGE or GAT layer's linear map is [out, in])."""
    last = next(reversed(params)).rsplit(".", 2)[0]
    for name, value in params.items():
        if name.startswith(last + ".") and value.dim() == 2:
            return int(value.shape[1])
    raise ValueError(f"no weight matrix in the output layer {last!r}")


def knn_edges(embedding: Tensor, k: int) -> Tensor:
    """Edges both ways between every node and its ``k`` most cosine-similar other nodes (the
    code's ``kneighbors_graph(..., metric='cosine')``), row blocks at a time."""
    n = embedding.shape[0]
    k = min(k, n - 1)
    if k < 1:
        return torch.empty(2, 0, dtype=torch.long, device=embedding.device)
    unit = F.normalize(embedding, dim=1)
    nearest = []
    for start in range(0, n, KNN_CHUNK):
        block = unit[start:start + KNN_CHUNK] @ unit.t()
        rows = torch.arange(start, start + len(block), device=unit.device)
        block[torch.arange(len(block), device=unit.device), rows] = -float("inf")
        nearest.append(block.topk(k, dim=1).indices)
    target = torch.cat(nearest).reshape(-1)
    source = torch.arange(n, device=unit.device).repeat_interleave(k)
    return torch.cat([torch.stack([source, target]), torch.stack([target, source])], dim=1)


def class_weights(logits: Tensor, y: Tensor, train: Tensor, num_classes: int) -> Tensor:
    """Each node's membership weight per class: its label with weight 1 on a training node,
    its predicted class with the predicted probability elsewhere."""
    probability, predicted = F.softmax(logits, dim=1).max(dim=1)
    predicted[train], probability[train] = y[train], 1.0
    return F.one_hot(predicted, num_classes).to(logits.dtype) * probability.view(-1, 1)


def prototype_alignment(first: Tensor, second: Tensor, temperature: float) -> Tensor:
    """L_PA: for each class row of ``first``, InfoNCE with the same row of ``second`` as the
    positive and the other rows of both as negatives, on cosine similarities over the
    temperature (the code's ``proto_align_loss(first=view 2, second=view 1)``)."""
    a, b = F.normalize(first, dim=1), F.normalize(second, dim=1)
    n = len(a)
    others = ~torch.eye(n, dtype=torch.bool, device=a.device)
    positive = (a * b).sum(1, keepdim=True)
    within = (a @ a.t())[others].view(n, n - 1)
    across = (a @ b.t())[others].view(n, n - 1)
    logits = torch.cat([positive, within, across], dim=1) / temperature
    return F.cross_entropy(logits, torch.zeros(n, dtype=torch.long, device=a.device))


def cluster_contrast(h: Tensor, targets: Tensor, prototypes: Tensor, labels: Tensor,
                     temperature: float) -> Tensor:
    """L_CPC over the rows whose class has a clustered prototype:
    -log(sum over the class's prototypes of exp(cos/tau) / sum over all of exp(cos/tau))."""
    positive = targets.view(-1, 1) == labels.view(1, -1)
    keep = positive.any(dim=1)
    if not bool(keep.any()):
        return h.new_zeros(())
    logits = F.normalize(h[keep], dim=1) @ F.normalize(prototypes, dim=1).t() / temperature
    held = logits.masked_fill(~positive[keep], -float("inf"))
    return (torch.logsumexp(logits, dim=1) - torch.logsumexp(held, dim=1)).mean()


def prototype_scores(h: Tensor, prototypes: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """Class scores: each class's highest cosine similarity over its clustered prototypes; a
    class without one scores -2, below any cosine, so the argmax is the nearest prototype."""
    similarity = F.normalize(h, dim=1) @ F.normalize(prototypes, dim=1).t()
    scores = similarity.new_full((len(h), num_classes), -2.0)
    return scores.scatter_reduce(1, labels.view(1, -1).expand_as(similarity), similarity,
                                 "amax")


def split_message(message: Message) -> tuple[Params, Tensor | None, Tensor | None]:
    """The global model, and the clustered prototypes with their classes (None before the
    server has any)."""
    params = {k: v for k, v in message.tensors.items() if k not in EXTRA}
    return params, message.tensors.get(PROTOTYPES), message.tensors.get(LABELS)


class FGGPServer(FedAvgServer):
    """Averages the models (FedAvg) and clusters each class's client prototypes (FINCH)."""

    state_keys: ClassVar[tuple[str, ...]] = (*FedAvgServer.state_keys, "prototypes", "labels")
    options: FGGPOptions

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.width = representation_width(setup.initial_params)
        self.prototypes = torch.zeros(0, self.width)
        self.labels = torch.zeros(0, dtype=torch.long)

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        tensors = dict(self.params)
        if len(self.labels):
            tensors |= {PROTOTYPES: self.prototypes, LABELS: self.labels}
        message = Message(tensors=tensors)
        return {c: message for c in clients}

    configure_evaluate = configure_fit

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        c = self.setup.num_classes
        return {**spec_of(self.params), PROTOTYPES: ((c, self.width), torch.float32),
                WEIGHTS: ((c,), torch.float32)}, fit_scalars()

    def check_reply(self, client: int, message: Message) -> None:
        if bool((message.tensors[WEIGHTS] < 0).any()):
            raise MessageError(f"client {client}: negative prototype weight")

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        if not replies:
            return
        models = [{k: m.tensors[k] for k in self.params} for m in replies.values()]
        self.params = self.average(models, self.weights(replies), self.params)
        self.prototypes, self.labels = self.cluster([replies[c] for c in sorted(replies)])

    def cluster(self, replies: list[Message]) -> tuple[Tensor, Tensor]:
        """Per class, FINCH over the prototypes of the replies that hold it, one mean per
        cluster; the classes in order, the replies in client order."""
        found, classes = [], []
        for c in range(self.setup.num_classes):
            held = [m.tensors[PROTOTYPES][c] for m in replies if m.tensors[WEIGHTS][c] > 0]
            if not held:
                continue
            points = torch.stack(held)
            means = cluster_means(points, finch(points)).float()
            found.append(means)
            classes.append(torch.full((len(means),), c, dtype=torch.long))
        if not found:
            return torch.zeros(0, self.width), torch.zeros(0, dtype=torch.long)
        return torch.cat(found), torch.cat(classes)


class TwoViewTerm:
    """CE(view 2) + lam_pa L_PA + lam_cpc L_CPC as the trainer's hooks: ``see`` (``on_batch``)
    records the batch about to train; the term (``extra_loss``) reads view 1's representation
    from the tap, after the trainer's forward pass, then runs view 2 under the live model."""

    def __init__(self, trainer: Trainer, tap: RepresentationTap, view: PreparedNodeClient,
                 weights: Tensor, prototypes: Tensor | None, labels: Tensor | None,
                 options: FGGPOptions):
        self.trainer, self.tap, self.view = trainer, tap, view
        self.held = weights.sum(0) > 0
        self.weights = weights[:, self.held]
        self.global_prototypes, self.labels = prototypes, labels
        self.options = options
        self.batch: NodeBatch | None = None

    def see(self, live: Params, batch: object) -> None:
        assert isinstance(batch, NodeBatch)  # node level only
        self.batch = batch

    def __call__(self, live: Params) -> Tensor:
        assert self.batch is not None
        index, targets = self.batch.index, self.batch.targets
        first = self.tap.read()
        view = self.view
        logits = functional_call(self.trainer.model, live,
                                 (view.x, view.edge_index, view.edge_weight))
        second = self.tap.read()
        loss = F.cross_entropy(F.embedding(index, logits), targets)
        o = self.options
        if o.lam_pa > 0:
            loss = loss + o.lam_pa * prototype_alignment(member_means(second, self.weights)[0],
                                                         member_means(first, self.weights)[0],
                                                         o.tau_pa)
        if o.lam_cpc > 0 and self.global_prototypes is not None and self.labels is not None:
            loss = loss + o.lam_cpc * cluster_contrast(F.embedding(index, first), targets,
                                                       self.global_prototypes, self.labels,
                                                       o.tau_cpc)
        return loss


class FGGPClient(FedAvgClient):
    """Trains the global model on two views with the prototype contrasts; uploads it with its
    class prototypes; predicts by the nearest clustered prototype."""

    options: FGGPOptions

    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep | None:
        return None  # two views and prototype contrasts: not a standard local step

    def represent(self, params: Params, ctx: ClientContext, data: PreparedNodeClient
                  ) -> tuple[Tensor, Tensor]:
        """(logits, representation) of every node of ``data`` under ``params``, in
        evaluation mode."""
        model = ctx.trainer.model
        model.eval()
        with torch.no_grad(), RepresentationTap(model) as tap:
            logits = functional_call(model, params, (data.x, data.edge_index, data.edge_weight))
            return logits, tap.read()

    def second_view(self, h: Tensor, ctx: ClientContext) -> PreparedNodeClient:
        """The client's subgraph with edges added between each node and its kNN under the
        global model's representation ``h``, prepared for the model."""
        data = ctx.node_data()
        graph = copy.copy(data.graph)  # the edges are replaced; features stay shared
        edges = torch.cat([graph.edge_index, knn_edges(h, self.options.neighbours).cpu()], 1)
        graph.edge_index = coalesce(edges, num_nodes=graph.num_nodes)
        return PreparedNodeClient(NodeClient(graph, data.global_ids), ctx.trainer.model,
                                  ctx.trainer.device)

    def node_weights(self, logits: Tensor, data: PreparedNodeClient) -> Tensor:
        train = torch.zeros(len(data.y), dtype=torch.bool, device=data.y.device)
        train[data.index["train"]] = True
        return class_weights(logits, data.y, train, self.setup.num_classes)

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        params, prototypes, labels = split_message(message)
        data, trainer = ctx.node_data(), ctx.trainer
        logits, h = self.represent(params, ctx, data)
        view = self.second_view(h, ctx)
        with RepresentationTap(trainer.model) as tap:
            term = TwoViewTerm(trainer, tap, view, self.node_weights(logits, data), prototypes,
                               labels, self.options)
            trained, stats = trainer.train(params, data, self.setup.local_epochs,
                                           self.setup.batch_size, term, memory=ctx.state,
                                           on_batch=term.see)
        logits, h = self.represent(trained, ctx, data)
        weights = self.node_weights(logits, data)
        own, _ = member_means(h, weights)
        return self.reply({**trained, PROTOTYPES: own.float(),
                           WEIGHTS: weights.sum(0).float()}, ctx, stats)

    def evaluate(self, message: Message, ctx: ClientContext) -> SplitMetrics:
        """The global model scored by its nearest clustered prototypes (once the server has
        any), or by its output layer."""
        params, prototypes, labels = split_message(message)
        if self.options.predict == "head" or prototypes is None or labels is None:
            return self.evaluate_params(params, ctx)

        def scored(data: PreparedClient, splits: tuple[str, ...]) -> SplitMetrics:
            assert isinstance(data, PreparedNodeClient)  # node level only
            _, h = self.represent(params, ctx, data)
            scores = prototype_scores(h, prototypes, labels, self.setup.num_classes)
            outputs = {s: (scores[data.index[s]], data.y[data.index[s]]) for s in splits
                       if data.num_samples(s)}
            return ctx.trainer.split_metrics(outputs, data)

        metrics = scored(ctx.data, ctx.trainer.own_splits)
        if ctx.global_test is not None:
            metrics["global"] = scored(ctx.global_test, ("test",))["test"]
        return metrics


def check_fggp_run(run: RunView) -> None:
    """The kNN view and the prototypes need the whole subgraph and a hidden representation:
    refuse neighbour sampling and models without one, in one line."""
    model = run.model
    if model.name not in ("gcn", "sage", "gat") or model.layers < 2:
        raise ValueError(f"fggp needs a message-passing model with a hidden layer (gcn, sage or "
                         f"gat, model.layers >= 2), not {model.name} with {model.layers}")
    if run.sampling.fanouts:
        raise ValueError("fggp trains on the whole subgraph and its kNN view; leave "
                         "sampling.fanouts unset")


FGGP = register(Algorithm(
    "fggp", FGGPServer, FGGPClient, FGGPOptions,
    family="averaging",
    paper="Wan et al., AAAI 2024 (FGGP)",
    levels=("node",),
    check=check_fggp_run,
    description="FedAvg whose clients train on a second view with kNN edges from the global "
                "model and contrast class prototypes; the server keeps FINCH-clustered "
                "prototypes per class, which classify nodes in place of the output layer"))
