"""APFL (Deng, Kamani, Mahdavi, "Adaptive personalized federated learning", arXiv 2003.13461,
2020), a FedSpray baseline. Each client keeps w (its copy of the global model), v (its local
model) and a mixing weight α_i; on every local mini-batch (the paper's Algorithm 1):

    w ← w − η ∇f(w)
    v ← v − η ∇_v f(v̄) = v − η α ∇f(v̄),      v̄ = α v + (1 − α) w
    α ← Π_[0,1](α − η_α ⟨v − w, ∇f(v̄)⟩)

The server averages the w's exactly as FedAvg does; the client deploys, and is evaluated on, the
personalised model v̄. The steps of v and α read v̄'s gradient at the step's start (w, v and
α before the step), as Algorithm 1 writes it. Only w crosses the boundary; v, α and v's
optimizer state stay in the client's state.

How it runs here: w is trained by the trainer's loop, exactly as FedAvg's client trains it (w's
update never reads v or α); v's and α's step is the trainer's ``on_batch`` hook on the same
batch. That step runs on a fork of the random state, so its forward pass draws the dropout masks
w's forward then draws, and w's trajectory, hence the server's model, is FedAvg's to the bit.
w and v both take the run's optimizer (the paper's plain SGD with ``optimizer.name=sgd``); α
takes plain projected gradient steps.

Where the authors' code (``MLOPTPSU/FedTorch``, ``comms/trainings/federated/apfl.py``) differs
from the paper, the paper is followed and the difference is an option or noted here:

* it adds 0.02·α to α's gradient (``comms/utils/flow_utils.py`` ``alpha_update``; PFLlib's
  ``clientapfl.py`` copies it): ``alpha_l2`` (0 here, the paper's rule; 0.02 the code's);
* it mixes the two models' outputs, α·f(x; v) + (1 − α)·f(x; w) (``comms/utils/eval.py``
  ``inference_personal``), not their parameters, and updates α once per round (on the first
  batch); here the paper's parameter mixture and an α step per batch.

FedSpray (KDD 2024) ran APFL as a baseline without saying how α started or which w its clients
mixed at evaluation; ``alpha`` and ``deploy_with`` hold our choices (spec §7.5 S4).
"""

from __future__ import annotations

from typing import Literal, cast

import torch
from pydantic import Field
from torch import Tensor

from graphfed.algorithms.averaging.fedavg import FedAvgOptions, FedAvgServer
from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.algorithms.registry import ANY_LEVEL, ANY_TASK, Algorithm, register
from graphfed.messages import Message
from graphfed.protocol import ClientContext
from graphfed.regression import mean_loss
from graphfed.tensors import Params
from graphfed.training import Trainer
from graphfed.training.batches import AnyBatch

ALPHA = "apfl_alpha"  # the client's α_i in ctx.state (v is ctx.state["params"])
LOCAL_W = "apfl_w"  # the client's last trained w, kept with deploy_with=local
V_OPTIMIZER = "apfl_v_optimizer"  # v's optimizer state, kept with optimizer.persistent


class APFLOptions(FedAvgOptions):
    alpha: float = Field(
        0.5, ge=0.0, le=1.0, description="initial mixing weight α_i of the local model v. "
        "RECONSTRUCTED: FedSpray does not say how its APFL started α; 0.5 is the authors' code "
        "default (FedTorch --fed_personal_alpha) and FedSpray spec §7.5 S4; any value in "
        "[0, 1] is an alternative")
    learn_alpha: bool = Field(True, description="learn α_i by projected gradient descent "
                              "(false: α_i stays at alpha, the paper's fixed-α runs)")
    alpha_lr: float | None = Field(
        None, gt=0.0, description="step size of α's update; default (null) the run's "
        "optimizer.lr (the paper uses the models' step size η)")
    alpha_l2: float = Field(
        0.0, ge=0.0, description="adds alpha_l2·α to α's gradient: 0 is the paper's rule, 0.02 "
        "the authors' code's (FedTorch alpha_update, copied by PFLlib)")
    deploy_with: Literal["global", "local"] = Field(
        "global", description="the w in the deployed v̄ = αv + (1−α)w. RECONSTRUCTED "
        "(FedSpray is silent): global, the latest global model the client received (the one it "
        "would train next; with α = 0 APFL is FedAvg); local, the w its last local epochs ended "
        "with (FedTorch validates the personal model before the round's averaging)")


def mixture(alpha: float, v: Params, w: Params) -> Params:
    """The personalised model v̄ = α v + (1 − α) w."""
    return {k: alpha * v[k] + (1.0 - alpha) * w[k] for k in v}


def alpha_gradient(v: Params, w: Params, mixed_gradient: Params) -> Tensor:
    """∂f(α v + (1 − α) w)/∂α = ⟨v − w, ∇f(v̄)⟩, given ∇f at v̄ (the paper's α update).

    Summed in float64 and rounded back to the gradients' dtype: a float32 sum of this many
    terms splits across CPU threads, and its last bits (then α's) would depend on the thread
    count."""
    total = cast(Tensor, sum(((v[k] - w[k]).double() * mixed_gradient[k].double()).sum()
                             for k in mixed_gradient))
    return total.to(next(iter(mixed_gradient.values())).dtype)


def projected_alpha_step(alpha: float, gradient: float, lr: float, l2: float) -> float:
    """α − lr·(gradient + l2·α), projected back onto [0, 1]."""
    return min(1.0, max(0.0, alpha - lr * (gradient + l2 * alpha)))


def loss_gradient(trainer: Trainer, params: Params, batch: AnyBatch) -> Params:
    """∇ of the batch's cross-entropy at ``params`` (zero for a parameter it does not use)."""
    leaf = {k: t.detach().requires_grad_(True) for k, t in params.items()}
    loss = mean_loss(trainer.forward(leaf, batch), batch.targets)
    grads = torch.autograd.grad(loss, list(leaf.values()), allow_unused=True)
    return {k: torch.zeros_like(t) if g is None else g
            for (k, t), g in zip(leaf.items(), grads, strict=True)}


class PersonalStep:
    """The trainer's ``on_batch`` hook: one step of v and α on the batch w is about to train on,
    at w's value before its step. ``v`` and ``alpha`` hold the results."""

    def __init__(self, trainer: Trainer, v: Params, alpha: float, alpha_lr: float | None,
                 alpha_l2: float, memory: dict | None):
        self.trainer = trainer
        self.v = {k: t.detach().clone().requires_grad_(True) for k, t in v.items()}
        self.optimizer = trainer.make_optimizer(list(self.v.values()))
        self.memory = memory if trainer.optimizer.persistent else None
        if self.memory is not None and V_OPTIMIZER in self.memory:
            self.optimizer.load_state_dict(self.memory[V_OPTIMIZER])
        self.alpha, self.alpha_lr, self.alpha_l2 = alpha, alpha_lr, alpha_l2

    def __call__(self, w: Params, batch: object) -> None:
        """The trainer's ``on_batch`` hook: called with each training batch."""
        w = {k: t.detach() for k, t in w.items()}
        v = {k: t.detach() for k, t in self.v.items()}
        device = self.trainer.device
        with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
            gradient = loss_gradient(self.trainer, mixture(self.alpha, v, w),
                                     cast("AnyBatch", batch))
        for k, t in self.v.items():
            t.grad = self.alpha * gradient[k]
        if self.alpha_lr is not None:
            self.alpha = projected_alpha_step(self.alpha, float(alpha_gradient(v, w, gradient)),
                                              self.alpha_lr, self.alpha_l2)
        self.optimizer.step()

    def trained(self) -> Params:
        """v after the epochs (and v's optimizer state saved, when persistent)."""
        if self.memory is not None:
            self.memory[V_OPTIMIZER] = self.optimizer.state_dict()
        return {k: t.detach() for k, t in self.v.items()}


class APFLClient(PersonalClient):
    """Trains w (uploaded) and, on the same batches, v and α (kept); deploys αv + (1−α)w."""

    options: APFLOptions

    def alpha(self, ctx: ClientContext) -> float:
        return ctx.state.get(ALPHA, self.options.alpha)

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        """``params`` is v: the deployed mixture with the received or the last local w."""
        local = self.options.deploy_with == "local" and LOCAL_W in ctx.state
        return mixture(self.alpha(ctx), params, ctx.state[LOCAL_W] if local else message.tensors)

    def alpha_lr(self) -> float | None:
        """α's step size, or None when α is fixed."""
        o = self.options
        if not o.learn_alpha:
            return None
        return o.alpha_lr if o.alpha_lr is not None else self.setup.optimizer.lr

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        step = PersonalStep(ctx.trainer, self.own_params(ctx), self.alpha(ctx), self.alpha_lr(),
                            self.options.alpha_l2, ctx.state)
        w, stats = ctx.trainer.train(message.tensors, ctx.data, self.setup.local_epochs,
                                     self.setup.batch_size, memory=ctx.state, on_batch=step)
        ctx.state["params"], ctx.state[ALPHA] = step.trained(), step.alpha
        if self.options.deploy_with == "local":
            ctx.state[LOCAL_W] = w
        return self.reply(w, ctx, stats)


APFL = register(Algorithm(
    "apfl", FedAvgServer, APFLClient, APFLOptions,
    family="personalized",
    tasks=ANY_TASK,
    paper="Deng et al., arXiv 2003.13461, 2020 (APFL)",
    levels=ANY_LEVEL,
    sparse_features=True,
    description="adaptive personalisation: each client deploys αv + (1−α)w of its local "
                "model v and the averaged model w, learning α"))
