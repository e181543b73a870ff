"""A standard local step: what a client of the averaging or personalised families trains when
its fit is plain local epochs of cross-entropy, optionally with a proximal term. Declaring the
step instead of running it lets the batched engine train many clients' steps together."""

from __future__ import annotations

from dataclasses import dataclass

from graphfed.tensors import Params
from graphfed.training.trainer import ExtraLoss


def proximal_term(mu: float, anchor: Params) -> ExtraLoss:
    """(mu/2) * ||w - anchor||^2 over all parameters (FedProx, Li et al. 2020, Eq. 2), as a
    loss closure."""
    frozen = {k: v.detach() for k, v in anchor.items()}

    def loss(live: Params):
        return 0.5 * mu * sum(((live[k] - frozen[k]) ** 2).sum() for k in frozen)

    return loss


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
