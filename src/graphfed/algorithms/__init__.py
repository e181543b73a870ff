"""Federated algorithms: one module each, registered by name."""

from graphfed.algorithms import (  # noqa: F401  (register)
    cgsv,
    dfedgnn,
    dw,
    fedavg,
    fedego,
    fedgcn,
    fedprox,
    fedsage,
    fedsage_plus,
    fedstar,
    fgfl,
    gcfl,
    graphfl,
    local,
    rffl,
)
from graphfed.algorithms.base import (
    REGISTRY,
    Algorithm,
    Client,
    ClientContext,
    Message,
    MessageError,
    Server,
    Setup,
    check_message,
    get_algorithm,
)

__all__ = ["REGISTRY", "Algorithm", "Client", "ClientContext", "Message", "MessageError",
           "Server", "Setup", "check_message", "get_algorithm"]
