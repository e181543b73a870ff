"""FedSpray (Fu, Chen, Zhang, Chen, Li, "Federated Graph Learning with Structure Proxy
Alignment", KDD 2024): personalised node classification under label skew, where a client's
minority-class nodes sit among other classes' nodes and message passing misleads them.

Every client keeps its own GNN (never sent). All clients train one global feature-structure
encoder whose classifier reads a node's features with a class-wise structure proxy, an unbiased
stand-in for the neighbourhood; the server averages the encoder and aligns each class's proxy
over the clients, weighted by how much of that class each holds. The encoder's proxy-aligned soft
targets distil into each GNN, and the GNN's predictions back into the encoder. Spec:
``shared/specs/fedspray.md`` (§7 where it differs from §1-§6); authors' code ``xbfu/FedSpray``.
``options.py`` holds the options and the ``paper``/``code`` profiles, ``encoder.py`` the encoder,
``proxies.py`` the proxy arithmetic, ``client.py`` the two-phase round, ``server.py`` the
aggregation.
"""

from __future__ import annotations

from graphfed.algorithms.fedspray.client import FedSprayClient
from graphfed.algorithms.fedspray.options import (
    FedSprayOptions,
    fedspray_backbone,
    fedspray_optimizer,
    require_full_batch_nodes,
)
from graphfed.algorithms.fedspray.server import FedSprayServer
from graphfed.algorithms.registry import Algorithm, register

FEDSPRAY = register(Algorithm(
    "fedspray", FedSprayServer, FedSprayClient, FedSprayOptions,
    family="personalized",
    paper="Fu et al., KDD 2024 (FedSpray)",
    levels=("node",),
    model=fedspray_backbone,
    optimizer=fedspray_optimizer,
    check=require_full_batch_nodes,
    sparse_features=True,
    modes={"code": ("fedspray.profile=code",)},
    description="personalised GNNs distilled from a global encoder with class-wise structure "
                "proxies aligned by class ratio"))
