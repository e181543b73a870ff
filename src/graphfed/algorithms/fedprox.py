"""FedProx (Li et al., MLSys 2020): FedAvg plus a proximal term (mu/2)||w - w_global||^2 in
the local objective, limiting client drift."""

from __future__ import annotations

from pydantic import Field

from graphfed.algorithms.base import Algorithm, register
from graphfed.algorithms.fedavg import FedAvgClient, FedAvgOptions, FedAvgServer
from graphfed.training import Params


class FedProxOptions(FedAvgOptions):
    mu: float = Field(0.01, ge=0.0, description="proximal coefficient")


def proximal_term(mu: float, anchor: Params):
    """(mu/2) * ||w - anchor||^2 over all parameters, as a loss closure."""
    frozen = {k: v.detach() for k, v in anchor.items()}

    def loss(live: Params):
        return 0.5 * mu * sum(((live[k] - frozen[k]) ** 2).sum() for k in frozen)

    return loss


class FedProxClient(FedAvgClient):
    def extra_loss(self, received):
        return proximal_term(self.options.mu, received) if self.options.mu > 0 else None


FEDPROX = register(Algorithm("fedprox", FedAvgServer, FedProxClient, FedProxOptions,
                             description="FedAvg with a proximal term (mu)"))
