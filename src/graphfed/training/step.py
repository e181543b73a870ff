"""A standard local step: what a client of the averaging or personalised families trains when
its fit is plain local epochs of cross-entropy, optionally with a proximal term or a fixed
gradient offset. Declaring the step instead of running it lets the batched engine train many
clients' steps together."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import cast

from torch import Tensor

from graphfed.tensors import Params
from graphfed.training.batches import PreparedClient
from graphfed.training.trainer import PlainLoss


def _total(terms: Iterable[Tensor]) -> Tensor:
    """``sum(terms)``: a tensor, as every sum here has a term (a parameter's, a loss's)."""
    return cast(Tensor, sum(terms))  # sum's start, the int 0, is returned for no terms only


def proximal_penalty(mu: float | Tensor, live: Params, anchor: Params,
                     clients: bool = False) -> Tensor:
    """(mu/2) * ||w - anchor||^2 over all parameters (FedProx, Li et al. 2020, Eq. 2); with
    ``clients`` the tensors are stacked per client (``[K, ...]``, ``mu`` of shape ``[K]``) and
    the result is one penalty per client."""
    start = 1 if clients else 0
    return 0.5 * mu * _total(((live[k] - anchor[k]) ** 2).flatten(start).sum(-1)
                             for k in anchor)


def linear_penalty(offset: Params, live: Params, clients: bool = False) -> Tensor:
    """<offset, w> summed over all parameters: its gradient is ``offset``, so adding it to the
    loss adds ``offset`` to every gradient (SCAFFOLD's correction c - c_i, Karimireddy et al.
    2020, Alg. 1 line 10); with ``clients`` the tensors are stacked per client (``[K, ...]``)
    and the result is one term per client."""
    start = 1 if clients else 0
    return _total((live[k] * offset[k]).flatten(start).sum(-1) for k in offset)


def proximal_term(mu: float, anchor: Params) -> PlainLoss:
    """``proximal_penalty`` around a fixed ``anchor``, as a loss closure."""
    frozen = {k: v.detach() for k, v in anchor.items()}
    return lambda live: proximal_penalty(mu, live, frozen)


@dataclass
class LocalStep:
    """Local epochs from ``params``; with ``proximal_mu > 0`` the loss adds
    (mu/2)||w - anchor||^2, with a ``gradient_offset`` it adds <offset, w>. ``data``: what the
    epochs train on where the algorithm shows the client its data otherwise (FedGCN's
    pre-aggregated features); None: the client's own."""

    params: Params
    proximal_mu: float = 0.0
    anchor: Params | None = None
    gradient_offset: Params | None = None
    data: PreparedClient | None = None

    def trains_on(self, own: PreparedClient) -> PreparedClient:
        """The data these epochs train on, given the client's ``own``."""
        return own if self.data is None else self.data

    def extra_loss(self) -> PlainLoss | None:
        terms: list[PlainLoss] = []
        if self.proximal_mu > 0 and self.anchor is not None:
            terms.append(proximal_term(self.proximal_mu, self.anchor))
        if self.gradient_offset is not None:
            offset = {k: v.detach() for k, v in self.gradient_offset.items()}
            terms.append(lambda live: linear_penalty(offset, live))
        if not terms:
            return None
        return lambda live: _total(term(live) for term in terms)
