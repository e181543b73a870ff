"""FedAMP (Huang, Chu, Zhou, Wang, Liu, Pei, Zhang, "Personalized cross-silo federated learning
on non-IID data", AAAI 2021): attentive message passing. Each round the server builds for
client i a personalised cloud model u_i = Σ_j ξ_ij θ_j, weighting most the clients whose models
are like its own, and the client trains its own model with a proximal pull towards u_i. The
client keeps its model: u_i is only the anchor of the pull, so the evaluated model is always
the client's own, trained one.

Two ways to weigh (``variant``):

* ``gpfl_code`` (default): the version GPFL's Table 2 ran, the pFedGraph repository's FedAMP
  copied into GPFL's code (file:line in Jiachen2cc/Graph-Personalized-Federated-Learning).
  ξ_ij ∝ exp(10·cos(Δθ_i, Δθ_j)) over j ≠ i, scaled to share 0.7, and ξ_ii = 0.3, with
  Δθ = θ − θ⁰ measured from the initial global model (``fedamp/utils.py:33-49,60-70``); the local
  loss adds (λ/2)‖θ − u_i‖², λ = 1 (``fedamp/train.py:38-40``; ``main.py:179-181``), from the
  second round on; a fresh Adam every round (``fedamp/train.py:25``; graphfed's default
  ``optimizer.persistent=false``). u_i goes to a separate "cluster" model, never into the local
  one (``fedamp/utils.py:99-100``), and the clients' own models are evaluated
  (``fedamp/train.py:80-88``).
* ``paper``: the paper's message passing, a gradient step on the attention-inducing penalty
  Σ_{i<j} A(‖θ_i − θ_j‖²) with A(x) = 1 − exp(−x/σ): ξ_ij = α_k·A′(‖θ_i − θ_j‖²) =
  (α_k/σ)·exp(−‖θ_i − θ_j‖²/σ) for j ≠ i and ξ_ii = 1 − Σ_{j≠i} ξ_ij, on the parameters
  themselves; the client minimises its loss + (λ/2α_k)‖θ − u_i‖² (the baseline table of
  ``shared/specs/README.md``; PFLlib's ``serveramp.py:81-109`` computes the same ξ). In round 1
  all models are θ⁰, so u_i = θ⁰ and the pull is towards it. PFLlib's client builds its term
  from ``.data`` tensors (no gradient) and unsquared (``clientamp.py:40-42``); here it is the
  paper's, with its gradient. ξ_ii is negative when Σ_{j≠i} ξ_ij > 1 (u_i then overshoots past
  the others): α_k ≤ σ/(K − 1) rules it out for K clients. PFLlib's defaults are
  α_k = σ = λ = 1; ours α_k = 0.1 keeps ξ_ii ≥ 0 up to 11 clients.

Bytes: every round a client uploads its model and receives u_i (nothing in round 1).
"""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field
from torch import Tensor

from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.algorithms.personalized.network import NetworkServer
from graphfed.algorithms.registry import ANY_TASK, Algorithm, register
from graphfed.mechanisms.client_network import (
    cosine_similarities,
    exp_similarity_weights,
    mix,
    squared_distances,
    stack,
)
from graphfed.messages import Message
from graphfed.protocol import AlgorithmOptions, ClientContext
from graphfed.tensors import Params
from graphfed.training import TrainStats
from graphfed.training.step import LocalStep


class FedAMPOptions(AlgorithmOptions):
    variant: Literal["gpfl_code", "paper"] = Field(
        "gpfl_code", description="weights of the cloud models: the GPFL code's (exp of scaled "
        "update cosines, fixed self weight) or the paper's (attention-function gradient step)")
    lam: float = Field(1.0, ge=0.0, description="proximal coefficient λ: the pull is "
                       "(λ/2)‖θ − u_i‖² (gpfl_code; code: 1) or (λ/2α_k)‖θ − u_i‖² (paper)")
    self_weight: float = Field(0.3, ge=0.0, le=1.0, description="gpfl_code: ξ_ii (code: 0.3)")
    cosine_scale: float = Field(10.0, ge=0.0, description="gpfl_code: ξ_ij ∝ "
                                "exp(cosine_scale · cos) (code: 10)")
    alpha_k: float = Field(0.1, gt=0.0, description="paper: the message-passing step α_k")
    sigma: float = Field(1.0, gt=0.0, description="paper: A(x) = 1 − exp(−x/σ)")


def code_weights(cosines: Tensor, self_weight: float, scale: float) -> Tensor:
    """GPFL code's ξ: row i is ``self_weight`` on i and 1 − ``self_weight`` shared over j ≠ i
    by a softmax of scale·cos_ij (the code's exp/sum, without its overflow); one client keeps
    everything."""
    k = cosines.shape[0]
    if k == 1:
        return torch.ones(1, 1, dtype=torch.float64)
    others = exp_similarity_weights(cosines, scale, include_self=False)
    return ((1.0 - self_weight) * others).fill_diagonal_(self_weight)


def paper_weights(sq_distances: Tensor, alpha_k: float, sigma: float) -> Tensor:
    """The paper's ξ: α_k·A′(x_ij) = (α_k/σ)·exp(−x_ij/σ) off the diagonal, ξ_ii = 1 − the
    rest of row i."""
    xi = (alpha_k / sigma) * torch.exp(-sq_distances.to(torch.float64) / sigma)
    xi.fill_diagonal_(0.0)
    return xi + torch.diag(1.0 - xi.sum(dim=1))


class FedAMPServer(NetworkServer):
    """Weighs the clients by their updates' cosines (gpfl_code) or distances (paper); sends
    client i its cloud model u_i."""

    options: FedAMPOptions

    def network(self, clients: list[int], models: list[Params], sizes: Tensor,
                replies: list[Message]) -> Tensor:
        o = self.options
        if o.variant == "paper":
            return paper_weights(squared_distances(stack(models, self.names)), o.alpha_k,
                                 o.sigma)
        return code_weights(cosine_similarities(self.updates(models)), o.self_weight,
                            o.cosine_scale)

    def messages(self, models: list[Params], weights: Tensor) -> list[dict[str, Tensor]]:
        return mix(models, weights)


class FedAMPClient(PersonalClient):
    """Trains its own model with a proximal pull towards its cloud model u_i."""

    options: FedAMPOptions

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        return params  # u_i anchors the pull; it never replaces the model

    def anchor(self, message: Message) -> Params | None:
        """u_i; before the first one arrives, θ⁰ for the paper (u_i¹ = θ⁰) and none for the
        code (no pull in its first round)."""
        if message.tensors:
            return message.tensors
        return self.setup.initial_params if self.options.variant == "paper" else None

    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep | None:
        o = self.options
        anchor = self.anchor(message)
        mu = o.lam / o.alpha_k if o.variant == "paper" else o.lam
        return LocalStep(self.own_params(ctx), mu if anchor is not None else 0.0, anchor)

    def finish_step(self, message: Message, ctx: ClientContext, params: Params,
                    stats: TrainStats) -> Message:
        return self.keep(ctx, params, stats)

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        return self.fit_by_step(message, ctx)


FEDAMP = register(Algorithm(
    "fedamp", FedAMPServer, FedAMPClient, FedAMPOptions,
    family="personalized",
    tasks=ANY_TASK,
    paper="Huang et al., AAAI 2021 (FedAMP)",
    levels=("graph", "node", "edge"),
    batched=True,
    description="attentive message passing: per-client cloud models weighted by model "
                "similarity, proximal pull towards them"))
