"""AdaFGL (Li, Wu, Zhang, Sun, Li, Wang, "AdaFGL: A new paradigm for federated node
classification with topology heterogeneity", ICDE 2024): a decoupled two-step method, run here
as one federation whose first ``extractor_rounds`` rounds are step 1 and the rest step 2.

Step 1, the federated knowledge extractor: FedAvg of the run's model (the server's model after
the last step-1 round is the extractor f).

Step 2, adaptive topology-aware personalised propagation, on each client alone. Sent the
extractor once, a client:

1. reads its soft labels P̂ = softmax(f(X, A)) on every node of its subgraph;
2. builds the corrected propagation matrix (local topology optimisation): S_ij = 1 where the
   soft labels of i ≠ j have cosine above ``similarity_threshold``, M = α·A + (1 − α)·S, and
   Â = D̃^(−1/2) (M + I) D̃^(−1/2); the propagated features [X, ÂX, …, Â^K X] are fixed inputs;
3. measures its homophily confidence score (HCS): half of its training labels, chosen at
   random, are propagated over the original topology (``lp_steps`` steps of
   Ŷᵏ = α_LP·Ã·Ŷᵏ⁻¹ + (1 − α_LP)·Ŷ⁰, Ã self-looped and symmetrically normalised, Ŷ⁰ one-hot on
   the kept half and uniform elsewhere), and HCS is the accuracy on the other half;
4. trains the homophilous module (an MLP on the propagated features, cross-entropy plus the
   knowledge-preserving MSE to P̂) and the heterophilous one (an MLP on X, an MLP on the
   propagated features and the learnable signed message passing of ``models.adafgl``, three
   cross-entropies) together, ``personal_epochs`` full-batch epochs a round;
5. predicts HCS·Ŷ_homo + (1 − HCS)·Ŷ_hete, Ŷ_homo = (softmax(Z_homo) + softmax(P̂)) / 2 and
   Ŷ_hete the mean of the three heterophilous softmaxes.

A step-2 reply carries no tensors: nothing leaves the client after it has the extractor.

Settled from the authors' code (``xkLi-Allen/AdaFGL``: ``main.py``, ``models/my_model.py``,
``models/label_propagation_models.py``) and OpenFGL's (``openfgl/flcore/adafgl``); where they
differ, an option names both:

* the combination: OpenFGL (and the paper's HCS) mixes the two modules by HCS and trains both;
  the authors' code switches, training and predicting with the homophilous module alone where
  HCS ≥ 0.9 and the heterophilous one otherwise (``combine``);
* α = 0.05 and β = 0.2 are the authors' code's; OpenFGL runs α = 0.5, β = 0;
* the schedule: OpenFGL runs FedAvg for its first 50 rounds, then one epoch of step 2 a round
  (the defaults here); the authors' code trains the extractor for all its 100 rounds (keeping
  the round of best validation accuracy) and then step 2 for 200 epochs in one go
  (``extractor_rounds`` = rounds − 1, ``personal_epochs=200``);
* both codes take cosines of softmax(P̂) (softmax applied to the already normalised soft
  labels), and average softmax(P̂) into Ŷ_homo; kept here;
* both codes' label propagation adds Ŷ⁰ to the kept rows after every step (``lp_reinject``,
  off: the plain recursion), and both keep the true labels of nodes outside the training,
  validation and test sets in Ŷ⁰; here only the kept training half is labelled;
* the step-2 optimiser is the run's (Adam, lr 1e-2, weight decay 5e-4 in both codes), and its
  state is kept across rounds as OpenFGL's one optimiser is; the extractor is the run's
  ``model`` (OpenFGL's choice; the authors' code defaults to ChebNet).

With ``client_global_eval`` a client scores the extractor on the global test set: the
personalised model is bound to its own subgraph. The dense N × N operators make step 2 cost
O(N²) memory per client, as in both codes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor
from torch.func import functional_call
from torch_geometric.nn.conv.gcn_conv import gcn_norm

from graphfed.algorithms.averaging.fedavg import FedAvgClient, FedAvgOptions, FedAvgServer
from graphfed.algorithms.personalized.fedgta import full_graph_logits, propagate_labels
from graphfed.algorithms.registry import Algorithm, RunView, register
from graphfed.errors import GraphfedError
from graphfed.messages import Message, ScalarSpec, TensorSpec, fit_scalars
from graphfed.models.adafgl import AdaFGLNet, grand_mean, soft_label_cosines
from graphfed.protocol import ClientContext, Setup
from graphfed.tensors import Params
from graphfed.training import TrainStats
from graphfed.training.batches import PreparedNodeClient
from graphfed.training.trainer import SplitMetrics

PERSONAL = "adafgl_personal"  # message scalar: this round is step 2
EXTRACTOR = "adafgl_extractor"  # ctx.state: the extractor the client was sent
SOFT_LABELS = "adafgl_soft_labels"  # ctx.state: P̂ on every node of the subgraph
HCS = "adafgl_hcs"  # ctx.state: the homophily confidence score
NET = "adafgl_net"  # ctx.state: the personalised network's parameters
NET_OPTIMIZER = "adafgl_optimizer"  # ctx.state: its optimiser's state
INPUTS = "adafgl_inputs"  # ctx.cache: the step-2 inputs, rebuilt from the data and P̂
PROBABILITY_FLOOR = 1e-12  # the log of a mixed probability reads at least this


class AdaFGLOptions(FedAvgOptions):
    extractor_rounds: int = Field(50, ge=1, description="rounds of step 1 (FedAvg of the "
                                  "extractor) before step 2 (OpenFGL: 50 of its 100; the "
                                  "authors' code: all of its 100, then step 2 apart)")
    personal_epochs: int = Field(1, ge=1, description="full-batch epochs of the personalised "
                                 "network per step-2 round (OpenFGL: 1; the authors' code: "
                                 "200 after step 1, in one go)")
    prop_steps: int = Field(3, ge=0, description="K, propagation steps of the features "
                            "(both codes: 3)")
    alpha: float = Field(0.05, ge=0.0, le=1.0, description="α, the original topology's "
                         "share in the corrected matrix α·A + (1 − α)·S (authors' code: "
                         "0.05; OpenFGL: 0.5)")
    beta: float = Field(0.2, ge=0.0, le=1.0, description="β, the soft-label graph's share in "
                        "the signed message passing's similarity β·S + (1 − β)·cos(H) "
                        "(authors' code: 0.2; OpenFGL: 0)")
    similarity_threshold: float = Field(0.999, ge=-1.0, le=1.0, description="S_ij = 1 where "
                                        "the soft labels' cosine exceeds it (both codes: "
                                        "0.999)")
    hidden: int = Field(64, ge=1, description="hidden width of the step-2 MLPs (both codes: "
                        "the run's hidden size, 64)")
    homo_layers: int = Field(2, ge=1, description="layers of the homophilous MLP (both "
                             "codes: 2)")
    hete_layers: int = Field(3, ge=1, description="layers of each heterophilous MLP (both "
                             "codes: 3)")
    dropout: float = Field(0.5, ge=0.0, lt=1.0, description="dropout of the step-2 MLPs "
                           "(both codes: 0.5)")
    lp_steps: int = Field(10, ge=1, description="label-propagation steps of the HCS (both "
                          "codes: 10)")
    lp_alpha: float = Field(0.5, ge=0.0, le=1.0, description="α_LP of the HCS's label "
                            "propagation (both codes: 0.5)")
    lp_reinject: bool = Field(False, description="add Ŷ⁰ to the kept rows after every LP step, "
                              "as both codes do (off: the plain LP recursion)")
    combine: Literal["weighted", "switch"] = Field(
        "weighted", description="weighted: predict HCS·Ŷ_homo + (1 − HCS)·Ŷ_hete, training "
        "both modules (the paper; OpenFGL); switch: the homophilous module alone where "
        "HCS ≥ switch_threshold, the heterophilous one otherwise (the authors' code)")
    switch_threshold: float = Field(0.9, ge=0.0, le=1.0, description="the HCS from which "
                                    "combine=switch uses the homophilous module (authors' "
                                    "code: 0.9)")


def check_schedule(run: RunView) -> None:
    """Refuse a run whose rounds all go to step 1: it would be FedAvg under another name."""
    options = run.algorithm_options()
    if not isinstance(options, AdaFGLOptions):
        raise TypeError(f"{type(options).__name__} are not AdaFGL's options")
    if run.rounds <= options.extractor_rounds:
        raise ValueError(f"adafgl.extractor_rounds={options.extractor_rounds} leaves no round "
                         f"for step 2 in rounds={run.rounds}; set it below rounds")


def homophily_weight(hcs: float, options: AdaFGLOptions) -> float:
    """The homophilous module's share of the prediction: HCS, or 0/1 with combine=switch."""
    if options.combine == "switch":
        return 1.0 if hcs >= options.switch_threshold else 0.0
    return hcs


def homophily_confidence(data: PreparedNodeClient, num_classes: int,
                         options: AdaFGLOptions) -> float:
    """HCS: the accuracy, on a random half of the training nodes, of label propagation from
    the other half over the original topology (0.5, no evidence, without a held-out node)."""
    device = data.y.device
    train = data.index["train"]
    order = train[torch.randperm(len(train)).to(device)]
    kept, held = order[:len(train) // 2], order[len(train) // 2:]
    if len(held) == 0:
        return 0.5
    n = len(data.y)
    y0 = torch.full((n, num_classes), 1.0 / num_classes, device=device)
    y0[kept] = F.one_hot(data.y[kept], num_classes).to(y0.dtype)
    edges, weights = gcn_norm(data.graph.edge_index.to(device), None, n, add_self_loops=True)
    rows = torch.zeros(n, 1, device=device)
    rows[kept] = 1.0
    y = propagate_labels(y0, edges, weights, options.lp_steps, options.lp_alpha,
                         rows if options.lp_reinject else None)
    return float((y[held].argmax(dim=1) == data.y[held]).to(torch.float64).mean())


def similarity_graph(soft_labels: Tensor, threshold: float) -> Tensor:
    """S: 1 where two distinct nodes' soft labels have cosine above ``threshold`` (the cosine
    of their softmax, as both codes take it), 0 elsewhere and on the diagonal."""
    return (soft_label_cosines(soft_labels) > threshold).to(soft_labels.dtype)


def corrected_operator(edge_index: Tensor, similarity: Tensor, alpha: float) -> Tensor:
    """Â = D̃^(−1/2) (α·A + (1 − α)·S + I)ᵀ D̃^(−1/2), D̃ its row sums (dense)."""
    n = len(similarity)
    adjacency = torch.zeros_like(similarity)
    adjacency[edge_index[0], edge_index[1]] = 1.0
    m = alpha * adjacency + (1 - alpha) * similarity + torch.eye(n, dtype=similarity.dtype,
                                                                  device=similarity.device)
    inv = (m @ torch.ones(n, 1, dtype=m.dtype, device=m.device)).view(-1).rsqrt()
    return inv[:, None] * m.t() * inv[None, :]


def propagated_features(operator: Tensor, x: Tensor, steps: int) -> Tensor:
    """[X, ÂX, …, Â^K X], side by side."""
    hops = [x]
    for _ in range(steps):
        hops.append(operator @ hops[-1])
    return torch.cat(hops, dim=1)


@dataclass
class StepTwoInputs:
    """What step 2 computes on, built once from the client's data and P̂ (``ctx.cache``)."""

    net: AdaFGLNet
    x: Tensor
    smoothed: Tensor
    similarity: Tensor
    soft_labels: Tensor


def personal_net(features: int, num_classes: int, options: AdaFGLOptions) -> AdaFGLNet:
    """A freshly initialised step-2 network (drawn from the global RNG)."""
    o = options
    return AdaFGLNet(features, o.hidden, num_classes, o.prop_steps, o.homo_layers,
                     o.hete_layers, o.dropout, o.beta)


def mixed_prediction(outputs: tuple[Tensor, Tensor, Tensor, Tensor], soft_labels: Tensor,
                     weight: float) -> Tensor:
    """w·Ŷ_homo + (1 − w)·Ŷ_hete, as probabilities."""
    homo, local, smooth, passed = (torch.softmax(z, dim=1) for z in outputs)
    homophilous = (homo + torch.softmax(soft_labels, dim=1)) / 2
    heterophilous = (local + smooth + passed) / 3
    return weight * homophilous + (1 - weight) * heterophilous


def step_two_loss(outputs: tuple[Tensor, Tensor, Tensor, Tensor], soft_labels: Tensor,
                  y: Tensor, train: Tensor, weight: float) -> Tensor:
    """The homophilous module's CE + MSE to P̂ where it has a share (w > 0), plus the
    heterophilous module's three CEs where it has one (w < 1)."""
    homo, local, smooth, passed = outputs
    targets = y[train]
    loss = torch.zeros((), device=y.device)
    if weight > 0:
        loss = loss + F.cross_entropy(homo[train], targets) + grand_mean((homo - soft_labels) ** 2)
    if weight < 1:
        loss = loss + sum((F.cross_entropy(z[train], targets) for z in (local, smooth, passed)),
                          torch.zeros((), device=y.device))
    return loss


class AdaFGLServer(FedAvgServer):
    """FedAvg for ``extractor_rounds`` rounds; then it sends the extractor to each client that
    has not yet answered a step-2 round, and nothing else."""

    state_keys: ClassVar[tuple[str, ...]] = (*FedAvgServer.state_keys, "started")
    options: AdaFGLOptions

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.started: set[int] = set()  # clients that answered a step-2 round
        self.personal_round = False  # this round is step 2 (set by configure_fit)

    def step_two(self, rnd: int) -> bool:
        return rnd > self.options.extractor_rounds

    def extractor_for(self, client: int) -> Params:
        """The extractor, for a client that may not have it yet; nothing for the others."""
        return {} if client in self.started else self.params

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        self.personal_round = self.step_two(rnd)
        if not self.personal_round:
            return super().configure_fit(rnd, clients)
        return {c: Message(self.extractor_for(c), {PERSONAL: True}) for c in clients}

    def configure_evaluate(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        if not self.step_two(rnd):
            return super().configure_fit(rnd, clients)
        return {c: Message(self.extractor_for(c)) for c in clients}

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        if self.personal_round:
            return {}, fit_scalars()
        return super().reply_spec(client)

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        if self.personal_round:
            self.started |= set(replies)
            return
        super().aggregate_fit(rnd, replies)


class AdaFGLClient(FedAvgClient):
    """FedAvg's client in step 1; in step 2 it trains and deploys its personalised network."""

    options: AdaFGLOptions

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        if not message.scalars.get(PERSONAL):
            return self.fit_by_step(message, ctx)
        if NET not in ctx.state:
            self.start_step_two(message.tensors, ctx)
        return self.reply({}, ctx, self.train_step_two(ctx))

    def start_step_two(self, extractor: Params, ctx: ClientContext) -> None:
        """Read P̂ off the extractor, measure HCS and draw the network's initial parameters."""
        if not extractor:
            raise GraphfedError(f"client {ctx.client_id}: step 2 began without the extractor")
        data = ctx.node_data()
        nodes = torch.arange(len(data.y), device=data.y.device)
        logits = full_graph_logits(ctx.trainer, extractor, data, nodes)
        ctx.state[EXTRACTOR] = extractor
        ctx.state[SOFT_LABELS] = torch.softmax(logits, dim=1)
        ctx.state[HCS] = homophily_confidence(data, self.setup.num_classes, self.options)
        net = personal_net(data.graph.x.shape[1], self.setup.num_classes, self.options)
        ctx.state[NET] = {k: v.detach().to(data.y.device) for k, v in net.named_parameters()}

    def inputs(self, ctx: ClientContext) -> StepTwoInputs:
        """The step-2 inputs, built on first use from the data and P̂."""
        cached = ctx.cache.get(INPUTS)
        if cached is None:
            data = ctx.node_data()
            device = data.y.device
            soft = ctx.state[SOFT_LABELS]
            x = data.graph.x
            x = (x.to_dense() if x.is_sparse else x).to(device, torch.float32)
            similarity = similarity_graph(soft, self.options.similarity_threshold)
            operator = corrected_operator(data.graph.edge_index.to(device), similarity,
                                          self.options.alpha)
            with torch.random.fork_rng(devices=[]):  # its parameters come from ctx.state
                net = personal_net(x.shape[1], self.setup.num_classes, self.options)
            cached = ctx.cache[INPUTS] = StepTwoInputs(
                net.to(device), x, propagated_features(operator, x, self.options.prop_steps),
                similarity, soft)
        return cached

    def outputs(self, params: Params, inputs: StepTwoInputs
                ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        out: tuple[Tensor, Tensor, Tensor, Tensor] = functional_call(
            inputs.net, params, (inputs.x, inputs.smoothed, inputs.similarity))
        return out

    def train_step_two(self, ctx: ClientContext) -> TrainStats:
        """``personal_epochs`` full-batch epochs, the optimiser's state kept across rounds."""
        data = ctx.node_data()
        inputs = self.inputs(ctx)
        train = data.index["train"]
        epochs = self.options.personal_epochs
        if len(train) == 0:
            return TrainStats(0.0, 0, 0)
        live = {k: v.detach().clone().requires_grad_(True) for k, v in ctx.state[NET].items()}
        optimizer = ctx.trainer.make_optimizer([live[k] for k in sorted(live)])
        if NET_OPTIMIZER in ctx.state:
            optimizer.load_state_dict(ctx.state[NET_OPTIMIZER])
        weight = homophily_weight(ctx.state[HCS], self.options)
        inputs.net.train()
        total = 0.0
        for _ in range(epochs):
            optimizer.zero_grad(set_to_none=True)
            loss = step_two_loss(self.outputs(live, inputs), inputs.soft_labels, data.y, train,
                                 weight)
            loss.backward()
            optimizer.step()
            total += float(loss.detach())
        ctx.state[NET] = {k: v.detach() for k, v in live.items()}
        ctx.state[NET_OPTIMIZER] = optimizer.state_dict()
        return TrainStats(total / epochs, epochs, epochs * len(train))

    def evaluate(self, message: Message, ctx: ClientContext) -> SplitMetrics:
        """The mixed prediction once step 2 has begun here; the extractor before."""
        if NET not in ctx.state:
            return self.evaluate_params(message.tensors, ctx)
        data = ctx.node_data()
        inputs = self.inputs(ctx)
        inputs.net.eval()
        with torch.no_grad():
            p = mixed_prediction(self.outputs(ctx.state[NET], inputs), inputs.soft_labels,
                                 homophily_weight(ctx.state[HCS], self.options))
        logits = p.clamp_min(PROBABILITY_FLOOR).log()
        splits = [s for s in ctx.trainer.own_splits if data.num_samples(s)]
        metrics = ctx.trainer.split_metrics(
            {s: (logits[data.index[s]], data.y[data.index[s]]) for s in splits}, data)
        if ctx.global_test is not None:
            metrics["global"] = ctx.trainer.evaluate(ctx.state[EXTRACTOR], ctx.global_test,
                                                     ("test",))["test"]
        return metrics


ADAFGL = register(Algorithm(
    "adafgl", AdaFGLServer, AdaFGLClient, AdaFGLOptions,
    family="personalized",
    paper="Li et al., ICDE 2024 (AdaFGL)",
    levels=("node",),
    check=check_schedule,
    small_run=("adafgl.extractor_rounds=1",),
    description="FedAvg trains a federated knowledge extractor, then each client trains "
                "homophilous and heterophilous propagation over a topology corrected by the "
                "extractor's soft labels, mixed by its homophily confidence score"))
