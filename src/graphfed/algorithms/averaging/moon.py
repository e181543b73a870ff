"""MOON (Li, He, Song, "Model-contrastive federated learning", CVPR 2021): FedAvg whose local
objective adds a contrast between representations. For a sample x let z = R_w(x) be the
representation the local model being trained gives it, z_glob = R_{w^t}(x) the global model's
(the one the round started from) and z_prev = R_{w_i^{t-1}}(x) that of the client's own model
after its previous local training. The model-contrastive loss (the paper's Eq. 2) is

    ℓ_con = −log( exp(sim(z, z_glob)/τ) / (exp(sim(z, z_glob)/τ) + exp(sim(z, z_prev)/τ)) )

with sim the cosine similarity, and the local objective (Eq. 3) is ℓ_sup + μ·ℓ_con, averaged over
the batch; the server is FedAvg's (Algorithm 1). The global and previous models are frozen; only
w trains. The server holds one global model, which every client deploys.

How it runs here: R is the input of the backbone's output layer (``mechanisms.representation``;
the paper's projection-head output, which its output layer reads), taken from the same forward
pass as the logits. z_glob and z_prev are computed on the same batch with the frozen models in
evaluation mode (no dropout), as the authors' code (``QinbinLi/MOON`` ``main.py``
``train_net_fedcon``: ``global_model.eval()``, frozen previous nets) and OpenFGL's do.

Where the code and the paper differ:

* the paper's μ is 5 on CIFAR-10 and 1 on CIFAR-100 and Tiny-ImageNet; both codes default to 1
  (``--mu``, OpenFGL's ``moon_mu``), the default here;
* before a client has trained once it has no previous model; the authors' code then contrasts
  with none (its model pool is empty in the first round: the loss is a one-class cross-entropy,
  zero), so its first local training is FedAvg's; the same here;
* OpenFGL's node-level version contrasts every node of the client's subgraph, not only the
  training nodes the loss is taken on (``contrast=all``).

At the edge level (link prediction, our adaptation) a sample is a scored node pair, and R the
input of the link predictor's output layer: with the ``inner`` decoder (no parameters) the
encoder's last layer, so every node's hidden representation is contrasted; with
``hadamard_mlp`` the decoder, so each scored pair's z_u ⊙ z_v (that epoch's training edges and
negatives).

Bytes: exactly FedAvg's; the previous model stays in the client's state.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from graphfed.algorithms.averaging.fedavg import FedAvgClient, FedAvgOptions, FedAvgServer
from graphfed.algorithms.registry import (
    ANY_LEVEL,
    ANY_TASK,
    Algorithm,
    Check,
    RunView,
    register,
)
from graphfed.mechanisms.representation import RepresentationTap
from graphfed.messages import Message
from graphfed.protocol import ClientContext
from graphfed.tensors import Params
from graphfed.training import Trainer
from graphfed.training.batches import AnyBatch, EdgeBatch, GraphBatch, NodeBatch
from graphfed.training.step import LocalStep

PREVIOUS = "moon_previous"  # the client's model after its last local training (w_i^{t-1})


class MoonOptions(FedAvgOptions):
    mu: float = Field(1.0, ge=0.0, description="μ, the weight of the model-contrastive loss "
                      "(paper: 5 on CIFAR-10, 1 on CIFAR-100/Tiny-ImageNet; code and OpenFGL: 1)",
                      json_schema_extra={"search": {
                          "choices": [0.1, 1.0, 5.0, 10.0],
                          "source": "Li, He, Song, CVPR 2021 (MOON): mu tuned from "
                          "{0.1, 1, 5, 10}"}})
    temperature: float = Field(0.5, gt=0.0, description="τ of the contrastive softmax "
                               "(paper and both codes: 0.5)")
    contrast: Literal["batch", "all"] = Field(
        "batch", description="node level: the nodes contrasted, the batch's training nodes "
        "(batch, the paper's samples) or every node of the client's subgraph (all, OpenFGL's)")


def model_contrastive_loss(z: Tensor, z_glob: Tensor, z_prev: Tensor,
                           temperature: float) -> Tensor:
    """ℓ_con of the paper's Eq. 2, averaged over the rows: cross-entropy of the cosine
    similarities [sim(z, z_glob), sim(z, z_prev)]/τ with the global one as the positive."""
    logits = torch.stack([F.cosine_similarity(z, z_glob, dim=-1),
                          F.cosine_similarity(z, z_prev, dim=-1)], dim=1) / temperature
    return F.cross_entropy(logits, torch.zeros(len(z), dtype=torch.long, device=z.device))


class ModelContrast:
    """μ·ℓ_con as the trainer's hooks: ``targets`` (``on_batch``) computes the frozen models'
    representations of the batch about to train, the term itself (``extra_loss``) reads the
    live model's from the tap, after the forward pass that gave the logits."""

    def __init__(self, trainer: Trainer, tap: RepresentationTap, global_params: Params,
                 previous: Params, options: MoonOptions):
        self.trainer, self.tap = trainer, tap
        self.frozen = (global_params, previous)
        self.options = options
        self.batch: AnyBatch | None = None
        self.inputs: tuple[Tensor, ...] | None = None  # the batch inputs last represented
        self.frozen_representations: list[Tensor] = []
        self.z_glob = self.z_prev = torch.empty(0)

    def rows(self, representation: Tensor) -> Tensor:
        """The rows contrasted: a node batch's training nodes (all nodes with ``contrast=all``),
        a graph batch's graphs, what an edge batch's output layer reads (nodes or pairs)."""
        batch = self.batch
        if isinstance(batch, NodeBatch) and self.options.contrast == "batch":
            return F.embedding(batch.index, representation)  # x[index]'s deterministic form
        return representation

    @torch.no_grad()
    def targets(self, live: Params, batch: object) -> None:
        """The frozen models' representations of ``batch``'s rows, computed once for as long
        as the batches share their inputs (full-batch training: once per fit)."""
        assert isinstance(batch, NodeBatch | GraphBatch | EdgeBatch)  # the trainer's batches
        self.batch = batch
        # an edge batch's pairs change every epoch (fresh negatives), and with them its rows
        pairs = (batch.pairs,) if isinstance(batch, EdgeBatch) else ()
        inputs = (batch.x, batch.edge_index, *pairs)
        if self.inputs is None or any(a is not b for a, b in zip(inputs, self.inputs,
                                                                  strict=True)):
            self.inputs, self.frozen_representations = inputs, self.represent(batch)
        self.z_glob, self.z_prev = (self.rows(h) for h in self.frozen_representations)

    def represent(self, batch: AnyBatch) -> list[Tensor]:
        """The global and previous models' representations of ``batch``, in evaluation
        mode."""
        model = self.trainer.model
        model.eval()
        try:
            out = []
            for params in self.frozen:
                self.trainer.forward(params, batch)
                out.append(self.tap.read())
            return out
        finally:
            model.train()

    def __call__(self, live: Params) -> Tensor:
        z = self.rows(self.tap.read())
        return self.options.mu * model_contrastive_loss(z, self.z_glob, self.z_prev,
                                                        self.options.temperature)


class MoonClient(FedAvgClient):
    """Trains the received global model with the contrastive term; keeps the result as its
    next previous model."""

    options: MoonOptions

    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep | None:
        return None  # the contrast reads representations: not a standard local step

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        previous = ctx.state.get(PREVIOUS)
        trainer = ctx.trainer
        if previous is None:  # no previous model yet: the code's first round, FedAvg's step
            params, stats = self.local_train(message.tensors, ctx)
        else:
            with RepresentationTap(trainer.model) as tap:
                term = ModelContrast(trainer, tap, message.tensors, previous, self.options)
                params, stats = trainer.train(message.tensors, ctx.data, self.setup.local_epochs,
                                              self.setup.batch_size, term, memory=ctx.state,
                                              on_batch=term.targets)
        ctx.state[PREVIOUS] = params
        return self.reply(params, ctx, stats)


def needs_hidden_representation(method: str) -> Check:
    """The check of a method whose terms act on hidden representations: a node model whose
    output layer reads the input features (SGC, a one-layer model) has none to train."""
    def check(run: RunView) -> None:
        model = run.model
        # at the edge level an MLP decoder is the output layer, reading pairs, not features
        node_outputs = run.level == "node" or (run.level == "edge" and model.decoder == "inner")
        if node_outputs and (model.name == "sgc"
                             or (model.layers < 2 and model.name != "mlp_sage")):
            raise ValueError(f"{method} contrasts the hidden representation a model's output "
                             f"layer reads; model {model.name} with {model.layers} layer(s) "
                             "has none (use model.layers >= 2, not sgc)")
    return check


MOON = register(Algorithm(
    "moon", FedAvgServer, MoonClient, MoonOptions,
    family="averaging",
    tasks=ANY_TASK,
    paper="Li et al., CVPR 2021 (MOON)",
    levels=ANY_LEVEL,
    check=needs_hidden_representation("moon"),
    description="FedAvg with a model-contrastive loss pulling each local representation "
                "towards the global model's and away from the previous local model's"))
