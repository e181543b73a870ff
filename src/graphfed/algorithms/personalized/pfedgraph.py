"""pFedGraph (Ye, Ni, Wu, Chen, Wang, "Personalized federated learning with inferred
collaboration graphs", ICML 2023), as the GPFL authors' code runs it (its ``pfedgraph_cosine``
copy of MediaBrain-SJTU/pFedGraph; file:line below are in Jiachen2cc/Graph-Personalized-Federated-
Learning).

Each round every client trains its model and uploads it. The server then, among the clients that
replied:

1. takes each update Δθ_j = θ_j − θ⁰ from the initial global model θ⁰, which the code keeps
   unchanged as its reference (``pfedgraph_cosine/utils.py:33-39``, ``train.py:95-97,130``);
2. sets d_ij = −cos(Δθ_i, Δθ_j), with a cosine above 0.9 counted as 1 (``utils.py:40-47``);
3. solves for each row the collaboration weights (``utils.py:71-92``, with α = 0.8 from
   ``config.py:5-9`` and p the clients' shares of the training graphs, ``train.py:125-126``)::

       a_i = argmin_{a ≥ 0, Σa = 1}  aᵀ(αI)a + (d_i − 2αp)ᵀa

   cvxpy's ``quad_form(x, αI)`` is αaᵀa, with no ½. Completing the square,
   αaᵀa − 2α⟨a, p − d_i/(2α)⟩ = α‖a − (p − d_i/(2α))‖² − α‖p − d_i/(2α)‖², and the last term
   is constant, so a_i is the Euclidean projection of p − d_i/(2α) onto the probability simplex
   (``graph_weights``; the objective is α‖a − p‖² + ⟨d_i, a⟩ up to a constant). No QP solver is
   needed;
4. sends client i its personalised model θ_i = Σ_j a_ij θ_j and the direction
   c_i = Σ_j a_ij θ_j/‖θ_j‖ (``utils.py:109-138``).

The client trains from θ_i with a fresh Adam (``train.py:38``; graphfed's default
``optimizer.persistent=false``) on cross-entropy + λ⟨c_i, θ⟩/‖θ‖, λ = 0.01, over all parameters
(``train.py:53-62``; no term in the first round, before any c_i exists). Minimising this term
*lowers* the cosine between θ and c_i, pushing the model away from its collaborators; the
upstream code has the same sign (``MediaBrain-SJTU/pFedGraph:pytorch/pfedgraph_cosine.py:64-70``).
The paper's objective, as we read it, rewards that similarity instead (−λ·cos);
``reward_similarity=true`` flips the sign. The default keeps the code's, which produced GPFL's
Table 2.

The code evaluates each client's model right after local training, before aggregation
(``train.py:121-124``). graphfed evaluates after the fit round, so with
``evaluate=before_aggregation`` the evaluate message is empty and the client evaluates the model it
trained and kept; ``after_aggregation`` sends θ_i instead.

Bytes: every round a client uploads its model and receives two model-sized tensors sets (θ_i and
c_i; nothing in round 1, when all hold θ⁰). Weights are accumulated in float64; a model's norm
below 1e-8 counts as 1e-8 (an all-zero upload cannot blow up c_i).
"""

from __future__ import annotations

from typing import Literal, cast

import torch
from pydantic import Field
from torch import Tensor

from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.algorithms.personalized.network import NetworkServer
from graphfed.algorithms.registry import ANY_TASK, Algorithm, register
from graphfed.mechanisms.client_network import (
    NORM_EPS,
    cosine_similarities,
    mix,
    project_to_simplex,
    row_norms,
    stack,
)
from graphfed.mechanisms.updates import under_prefix, with_prefix
from graphfed.messages import Message
from graphfed.protocol import AlgorithmOptions, ClientContext
from graphfed.tensors import Params
from graphfed.training.trainer import ExtraLoss

MODEL, DIRECTION = "model.", "direction."


class PFedGraphOptions(AlgorithmOptions):
    alpha: float = Field(0.8, gt=0.0, description="weight of ‖a_i − p‖² in the graph QP: larger "
                         "keeps the weights near the size shares p (code: 0.8)")
    lam: float = Field(0.01, ge=0.0, description="coefficient λ of the cosine regulariser "
                       "(code: 0.01)")
    similarity_threshold: float = Field(0.9, description="a cosine of updates above it counts "
                                        "as 1 (code: 0.9); 1 or more turns the rule off")
    evaluate: Literal["before_aggregation", "after_aggregation"] = Field(
        "before_aggregation", description="evaluate the model each client trained (code) or "
        "the personalised aggregate it will train from next")
    reward_similarity: bool = Field(False, description="subtract the regulariser (reward the "
                                    "cosine to c_i, the paper's reading) instead of adding it "
                                    "(the code)")


def graph_weights(cosines: Tensor, sizes: Tensor, alpha: float, threshold: float) -> Tensor:
    """Row i: the projection of p − d_i/(2α) onto the simplex, d_ij = −cos_ij with cosines
    above ``threshold`` set to 1 and p = sizes / Σ sizes (the module docstring derives it)."""
    d = -torch.where(cosines > threshold, torch.ones_like(cosines), cosines)
    p = sizes.to(torch.float64) / sizes.sum()
    return project_to_simplex(p[None, :] - d / (2 * alpha))


def cosine_regulariser(lam: float, direction: Params) -> ExtraLoss:
    """λ⟨c, θ⟩/‖θ‖ over every parameter, summed tensor by tensor: no flat copy per step, and
    each of GIN's tensors is under the 32,768 elements above which PyTorch splits a sum across
    threads (and its last bits with the thread count)."""
    frozen = {k: v.detach() for k, v in direction.items()}

    def term(live: Params) -> Tensor:
        dot = sum((live[k] * frozen[k]).sum() for k in frozen)
        norm = cast(Tensor, sum((live[k] * live[k]).sum() for k in frozen)).sqrt()
        return lam * dot / norm

    return term


class PFedGraphServer(NetworkServer):
    """Infers the collaboration graph by the per-row QP; sends θ_i and c_i to client i."""

    options: PFedGraphOptions

    def network(self, clients: list[int], models: list[Params], sizes: Tensor,
                replies: list[Message]) -> Tensor:
        o = self.options
        return graph_weights(cosine_similarities(self.updates(models)), sizes, o.alpha,
                             o.similarity_threshold)

    def messages(self, models: list[Params], weights: Tensor) -> list[dict[str, Tensor]]:
        norms = row_norms(stack(models)).clamp_min(NORM_EPS)
        personal = mix(models, weights)
        directions = mix(models, weights / norms[None, :])
        return [{**with_prefix(m, MODEL), **with_prefix(c, DIRECTION)}
                for m, c in zip(personal, directions, strict=True)]

    def configure_evaluate(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        if self.options.evaluate == "before_aggregation":
            return {c: Message() for c in clients}
        return {c: Message({k: v for k, v in self.outbox.get(c, {}).items()
                            if k.startswith(MODEL)}) for c in clients}


class PFedGraphClient(PersonalClient):
    """Trains from its personalised model with the cosine regulariser; keeps what it trained."""

    options: PFedGraphOptions

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        return under_prefix(message.tensors, MODEL) or params

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        o = self.options
        direction = under_prefix(message.tensors, DIRECTION)
        lam = -o.lam if o.reward_similarity else o.lam
        term = cosine_regulariser(lam, direction) if direction and o.lam > 0 else None
        return self.keep(ctx, *self.local_train(self.current(message, ctx), ctx, term))


PFEDGRAPH = register(Algorithm(
    "pfedgraph", PFedGraphServer, PFedGraphClient, PFedGraphOptions,
    family="personalized",
    tasks=ANY_TASK,
    paper="Ye et al., ICML 2023 (pFedGraph)",
    levels=("graph", "node", "edge"),
    description="per-client aggregation by a collaboration graph inferred from update cosines "
                "(simplex QP) with a cosine regulariser"))
