"""FedProx (Li et al., MLSys 2020): FedAvg plus a proximal term (mu/2)||w - w_global||^2 in
the local objective, limiting client drift.

``adaptive`` is the variant FedEgo (Zhang et al., TKDD 2023) runs as its FedProx baseline, after
its code: the term is mu * sum_w ||w - w_start||_F / numel(w) (Frobenius norm, not squared, each
tensor divided by its size), and mu, kept per client across rounds, starts at 1 and moves before
every batch: x10 when loss > 5 mu prox (if mu <= 1), /10 when loss < mu prox / 2 (if mu >= 1e-4).
So mu can reach 10 and 1e-5 (the paper says it moves within [0.001, 1]). In FedEgo's code the term
is built from ``state_dict()`` tensors, which are detached, so it never reaches the gradients and
that FedProx trains like FedAvg; ``compat_detached`` reproduces that, the default does not.
"""

from __future__ import annotations

from typing import cast

from pydantic import Field
from torch import Tensor

from graphfed.algorithms.averaging.fedavg import FedAvgClient, FedAvgOptions, FedAvgServer
from graphfed.algorithms.registry import ANY_LEVEL, ANY_TASK, Algorithm, register
from graphfed.messages import Message, ScalarRange, ScalarSpec, TensorSpec
from graphfed.protocol import ClientContext
from graphfed.tensors import Params
from graphfed.training.step import LocalStep

MU_KEY = "fedprox_mu"
MU = "mu"  # reply scalar of the adaptive variant: the client's mu after its local epochs


class FedProxOptions(FedAvgOptions):
    mu: float = Field(0.01, ge=0.0, description="proximal coefficient (the adaptive mu starts "
                      "at adaptive_mu_start instead)", json_schema_extra={"search": {
                          "low": 0.001, "high": 1.0, "log": True, "points": 4,
                          "source": "Li et al., MLSys 2020 (FedProx): the best mu from the "
                          "candidate set {0.001, 0.01, 0.1, 1}"}})
    adaptive: bool = Field(False, description="FedEgo's adaptive mu and size-normalised "
                           "Frobenius proximal term (see the module docstring)")
    adaptive_mu_start: float = Field(1.0, gt=0.0, description="initial adaptive mu (FedEgo: 1)")
    compat_detached: bool = Field(
        False, description="adaptive only: the term adds to the loss value but not to the "
        "gradients, as in FedEgo's code (state_dict tensors are detached)")


def normalised_distance(live: Params, anchor: Params) -> Tensor:
    """sum over tensors of ||w - anchor||_F / numel(w) (FedEgo's code's proximal term)."""
    return cast(Tensor, sum((live[k] - anchor[k]).norm() / anchor[k].numel() for k in anchor))


def adapt_mu(mu: float, loss: float, prox: float) -> float:
    """FedEgo's rule, applied before each batch's step."""
    if loss > 5 * mu * prox and mu <= 1:
        return mu * 10
    if loss < mu * prox / 2 and mu >= 1e-4:
        return mu / 10
    return mu


class AdaptiveProximalTerm:
    """mu * normalised_distance(w, anchor), with mu adapted to each batch loss (``sees_loss``:
    the trainer passes the batch's detached loss). ``mu`` holds the current value."""

    sees_loss = True

    def __init__(self, mu: float, anchor: Params, detached: bool = False):
        self.mu = mu
        self.anchor = {k: v.detach() for k, v in anchor.items()}
        self.detached = detached

    def __call__(self, live: Params, loss: Tensor) -> Tensor:
        prox = normalised_distance(live, self.anchor)
        self.mu = adapt_mu(self.mu, float(loss), float(prox.detach()))
        return self.mu * (prox.detach() if self.detached else prox)


class FedProxServer(FedAvgServer):
    """FedAvg's server; an adaptive client's reply also states its mu (recorded, never used)."""

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        spec, scalars = super().reply_spec(client)
        return spec, {**scalars, MU: ScalarRange(0.0).optional}


class FedProxClient(FedAvgClient):
    options: FedProxOptions
    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep | None:
        """The plain term is a standard step; the adaptive one (mu moving per batch) is not."""
        if getattr(self.options, "adaptive", False):
            return None
        return LocalStep(message.tensors, self.options.mu, message.tensors)

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        if not getattr(self.options, "adaptive", False):
            return super().fit(message, ctx)
        term = AdaptiveProximalTerm(ctx.state.get(MU_KEY, self.options.adaptive_mu_start),
                                    message.tensors, self.options.compat_detached)
        params, stats = self.local_train(message.tensors, ctx, term)
        ctx.state[MU_KEY] = term.mu
        return self.reply(params, ctx, stats, **{MU: term.mu})


FEDPROX = register(Algorithm(
    "fedprox", FedProxServer, FedProxClient, FedProxOptions,
    family="averaging",
    levels=ANY_LEVEL,
    tasks=ANY_TASK,
    paper="Li et al., MLSys 2020 (FedProx)",
    batched=True,
    sparse_features=True,
    description="FedAvg with a proximal term (mu; or FedEgo's adaptive mu)"))
