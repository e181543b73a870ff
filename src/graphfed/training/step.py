"""A standard local step: what a client of the averaging or personalised families trains when
its fit is plain local epochs of cross-entropy, optionally with a proximal term. Declaring the
step instead of running it lets the batched engine train many clients' steps together."""

from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from graphfed.tensors import Params
from graphfed.training.trainer import ExtraLoss


def proximal_penalty(mu: float | Tensor, live: Params, anchor: Params,
                     clients: bool = False) -> Tensor:
    """(mu/2) * ||w - anchor||^2 over all parameters (FedProx, Li et al. 2020, Eq. 2); with
    ``clients`` the tensors are stacked per client (``[K, ...]``, ``mu`` of shape ``[K]``) and
    the result is one penalty per client."""
    start = 1 if clients else 0
    return 0.5 * mu * sum(((live[k] - anchor[k]) ** 2).flatten(start).sum(-1) for k in anchor)


def proximal_term(mu: float, anchor: Params) -> ExtraLoss:
    """``proximal_penalty`` around a fixed ``anchor``, as a loss closure."""
    frozen = {k: v.detach() for k, v in anchor.items()}
    return lambda live: proximal_penalty(mu, live, frozen)


@dataclass
class LocalStep:
    """Local epochs from ``params``; with ``proximal_mu > 0`` the loss adds
    (mu/2)||w - anchor||^2."""

    params: Params
    proximal_mu: float = 0.0
    anchor: Params | None = None

    def extra_loss(self) -> ExtraLoss | None:
        if self.proximal_mu > 0 and self.anchor is not None:
            return proximal_term(self.proximal_mu, self.anchor)
        return None
