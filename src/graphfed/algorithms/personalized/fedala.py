"""FedALA (Zhang, Hua, Wang, Song, Xue, Ma, Guan, "FedALA: adaptive local aggregation for
personalized federated learning", AAAI 2023), after the authors' code (``TsingZ0/FedALA``:
``system/utils/ALA.py``, ``clientALA.py``, ``serverALA.py``; PFLlib carries the same module).

The server is FedAvg's. Before training, client i aggregates the global model Θ it received into
its previous local model θ_i, element-wise (Algorithm 1, lines 6–16, the ALA module):

    θ̂_i = θ_i + (Θ − θ_i) ⊙ [1; W_i],

1 on the lower layers (they take the global model outright) and learned weights W_i ∈ [0, 1]
on the top p layers. W_i is learned on a random s% of the client's training data by

    W_i ← clip_[0,1](W_i − η ∇_θ̂ L(θ̂_i) ⊙ (Θ − θ_i)),

one step per mini-batch, θ̂_i recomputed after each step. The first time a client learns W_i
(from all ones) it repeats epochs over its sample until the standard deviation of the last
``window`` epochs' losses falls below ``threshold``; afterwards one epoch a round, from the W_i
it kept. ALA is skipped while the local model still equals the global one (round 1). The client
then trains θ̂_i for the run's local epochs, keeps the result as θ_i and uploads it.

Where this runs otherwise than the code:

* the sample is a contiguous random run of s% of the training samples, as the code takes it,
  cut into the run's batches (node level: the whole run in one batch, as a full-graph epoch);
  a run shorter than one batch is one batch, where the code's ``drop_last`` leaves none;
* the first learning stops after ``start_max_epochs`` epochs at the latest (the code loops
  until its criterion holds);
* ALA's forward passes (dropout on, as the code's local model is in training mode) draw on a
  fork of the random state, so the local epochs draw what FedAvg's would: with η = 0 (W_i
  stays 1, θ̂_i = Θ) the server's model is FedAvg's to the bit;
* θ̂ is computed as W ⊙ Θ + (1 − W) ⊙ θ (the same value; exact at W = 0 and 1);
* a client is evaluated with its trained local model θ_i; the code scores θ̂_i of the next
  round (evaluation follows the ALA of ``send_models``), which would need the weight learning,
  random draws included, inside an evaluation;
* the code checks "local equals global" by the sum of the first tensor's difference; here
  every tensor is compared.

Bytes: the whole model down and up, as FedAvg; nothing at evaluation.
"""

from __future__ import annotations

import random
import statistics

import torch
from pydantic import Field

from graphfed.algorithms.averaging.fedavg import FedAvgOptions, FedAvgServer
from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.algorithms.registry import ANY_LEVEL, ANY_TASK, Algorithm, register
from graphfed.mechanisms.layers import top_layers
from graphfed.messages import Message
from graphfed.protocol import ClientContext, Server, Setup
from graphfed.regression import mean_loss
from graphfed.tensors import Params
from graphfed.training import PreparedClient, Trainer
from graphfed.training.batches import AnyBatch, PreparedEdgeClient, PreparedNodeClient

WEIGHTS = "fedala_weights"  # the client's W_i (top-layer tensors), kept across rounds


class FedALAOptions(FedAvgOptions):
    eta: float = Field(1.0, ge=0.0, description="η, the learning rate of the weights W_i "
                       "(paper and code: 1.0)")
    rand_percent: float = Field(80.0, gt=0.0, le=100.0, description="s, the percentage of "
                                "the local training data W_i is learned on (paper, code: 80)")
    layers: int = Field(
        1, ge=1, description="p, the top layers whose aggregation is learned; the layers "
        "below take the global model. The paper's p = 1; the code's -p 2 counts parameter "
        "tensors, the last layer's weight and bias, the same layer")
    threshold: float = Field(0.1, gt=0.0, description="the first learning stops when the "
                             "losses' standard deviation falls below it (code: 0.1)")
    window: int = Field(10, ge=1, description="how many recent epoch losses that standard "
                        "deviation reads (code: num_pre_loss 10)")
    start_max_epochs: int = Field(1000, ge=1, description="a bound on the first learning's "
                                  "epochs (not in the code, which loops until converged)")


def aggregate(local: Params, glob: Params, weights: Params) -> Params:
    """θ̂ = θ + (Θ − θ) ⊙ W on the weighted tensors, Θ on the others; computed as
    W ⊙ Θ + (1 − W) ⊙ θ, the same value, which is Θ exactly where W = 1 and θ where W = 0
    (where θ + (Θ − θ) may round away from Θ)."""
    return {k: weights[k] * glob[k] + (1.0 - weights[k]) * local[k] if k in weights
            else glob[k] for k in glob}


def weight_step(weights: Params, gradient: Params, local: Params, glob: Params, eta: float
                ) -> Params:
    """One step W ← clip_[0,1](W − η ∇_θ̂ L ⊙ (Θ − θ)), the chain rule through θ̂'s formula."""
    return {k: (w - eta * gradient[k] * (glob[k] - local[k])).clamp(0.0, 1.0)
            for k, w in weights.items()}


def sample_batches(data: PreparedClient, percent: float, batch_size: int | None
                   ) -> list[AnyBatch]:
    """The training samples ALA learns on: a contiguous run of ``percent``% of them starting
    at a random place (Python's RNG, as the code draws it), in full batches (or one)."""
    n = data.num_samples("train")
    if n == 0:
        return []
    count = max(1, int(percent / 100 * n))
    start = random.randint(0, n - count)
    ids = torch.arange(start, start + count)
    chunks = ([ids] if batch_size is None or batch_size >= count
              else [c for c in ids.split(batch_size) if len(c) == batch_size])
    if isinstance(data, PreparedNodeClient):
        index = data.index["train"]
        return [data.batch_of(index[c.to(index.device)]) for c in chunks]
    if isinstance(data, PreparedEdgeClient):  # its training edges, with fresh negatives
        return [data.batch_of("train", c.to(data.train_edges.device)) for c in chunks]
    graphs = data.splits["train"]
    return [graphs.take(c.to(graphs.batch.device)) for c in chunks]


class AdaptiveLocalAggregation:
    """The ALA module on one client: learns ``weights`` (W_i) for one round's θ̂."""

    def __init__(self, trainer: Trainer, options: FedALAOptions, local: Params, glob: Params,
                 weights: Params):
        self.trainer, self.options = trainer, options
        self.local = {k: v.detach() for k, v in local.items()}
        self.glob = {k: v.detach() for k, v in glob.items()}
        self.weights = weights

    def gradient(self, batch: AnyBatch) -> tuple[Params, float]:
        """∇_θ̂ L on the weighted tensors at the current θ̂, and the batch loss."""
        params = aggregate(self.local, self.glob, self.weights)
        leaves = {k: params[k].requires_grad_(True) for k in self.weights}
        loss = mean_loss(self.trainer.forward(params, batch), batch.targets)
        grads = torch.autograd.grad(loss, list(leaves.values()), allow_unused=True)
        return ({k: torch.zeros_like(t) if g is None else g
                 for (k, t), g in zip(leaves.items(), grads, strict=True)}, float(loss.detach()))

    def learn(self, batches: list[AnyBatch], converge: bool) -> list[float]:
        """Weight-learning epochs, each one's last batch loss returned: one epoch, or with
        ``converge`` until the losses settle (or ``start_max_epochs``). Dropout on, on a
        fork of the random state."""
        o = self.options
        losses: list[float] = []
        if not batches:
            return losses
        self.trainer.model.train()
        device = self.trainer.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            for _ in range(o.start_max_epochs if converge else 1):
                for batch in batches:
                    gradient, loss = self.gradient(batch)
                    self.weights = weight_step(self.weights, gradient, self.local, self.glob,
                                               o.eta)
                losses.append(loss)
                if len(losses) > o.window and \
                        statistics.pstdev(losses[-o.window:]) < o.threshold:
                    break
        return losses

    def initialised(self) -> Params:
        """θ̂ under the current weights."""
        return aggregate(self.local, self.glob, self.weights)


class FedALAServer(FedAvgServer):
    """FedAvg's server; evaluation sends nothing, as each client scores its own model."""

    configure_evaluate = Server.configure_evaluate


class FedALAClient(PersonalClient):
    """Initialises its model by ALA from its own and the global one, trains it, uploads it."""

    options: FedALAOptions

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.top = top_layers(setup.initial_params, self.options.layers)

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        return params  # evaluated: the trained local model (see the module docstring)

    def initialise(self, glob: Params, ctx: ClientContext) -> Params:
        """θ̂_i, learning (and keeping) W_i unless the local model is still the global one."""
        local = self.own_params(ctx)
        if all(torch.equal(local[k], glob[k]) for k in glob):
            return glob
        start = WEIGHTS not in ctx.state
        weights = ctx.state.get(WEIGHTS) or {k: torch.ones_like(glob[k]) for k in self.top}
        ala = AdaptiveLocalAggregation(ctx.trainer, self.options, local, glob, weights)
        ala.learn(sample_batches(ctx.data, self.options.rand_percent, self.setup.batch_size),
                  converge=start)
        ctx.state[WEIGHTS] = ala.weights
        return ala.initialised()

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        trained, stats = self.local_train(self.initialise(message.tensors, ctx), ctx)
        return self.keep(ctx, trained, stats)


FEDALA = register(Algorithm(
    "fedala", FedALAServer, FedALAClient, FedALAOptions,
    family="personalized",
    tasks=ANY_TASK,
    paper="Zhang et al., AAAI 2023 (FedALA)",
    levels=ANY_LEVEL,
    sparse_features=True,
    small_run=("fedala.start_max_epochs=5",),  # mini-batch losses on ESOL never settle
    description="FedAvg whose clients initialise each round by adaptive local aggregation: "
                "learned element-wise weights in [0, 1] mix the global model into the local "
                "one on the top layers"))
