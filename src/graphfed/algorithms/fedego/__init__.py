"""FedEgo (Zhang et al., ACM TKDD 2023): personalised node classification with ego-graphs.

Each client model has reduction layers Θ (a linear map, averaged by FedAvg) and personalisation
layers Φ (two SAGE layers and a classifier) that read fixed-shape 2-hop ego-graphs. After local
training a client turns every mini-batch of its training nodes into one *mashed* ego-graph (the
batch's aligned ego-graphs averaged: embeddings and one-hot labels, Mixup) and uploads them with
Θ_i. The server averages Θ, trains a global Φ_g on the union of the mashed graphs (soft labels),
and each client mixes Φ_i ← λ_i Φ_g + (1 − λ_i) Φ_i with λ_i = (EMD(P_i, P_g) / 2)^γ, where P
are label distributions. Spec: ``shared/specs/fedego.md``.
"""

from __future__ import annotations

from graphfed.algorithms.fedego.client import FedEgoClient
from graphfed.algorithms.fedego.options import FedEgoOptions
from graphfed.algorithms.fedego.server import FedEgoServer
from graphfed.algorithms.registry import Algorithm, RunView, register
from graphfed.models.ego import FedEgoNet
from graphfed.models.gnn import ModelOptions


def build_fedego_net(level: str, in_dim: int, num_classes: int, opts: ModelOptions,
                     options: FedEgoOptions) -> FedEgoNet:
    """FedEgo's own network; the config's model section gives its width and dropout."""
    return FedEgoNet(in_dim, opts.hidden, num_classes, opts.dropout, options.linear,
                     options.fanout, options.ego, options.sage_weights == "shared",
                     options.linear_last_relu)


def refuse_node_sampling(config: RunView) -> None:
    """FedEgo samples its own ego-graphs; the generic neighbour sampling would be a second one."""
    if config.sampling.fanouts:
        raise ValueError("fedego samples its own ego-graphs (fedego.hops, fedego.fanout; "
                         "fedego.eval_sampling); leave sampling.fanouts unset")


FEDEGO = register(Algorithm(
    "fedego", FedEgoServer, FedEgoClient, FedEgoOptions,
    family="personalized",
    paper="Zhang et al., ACM TKDD 2023 (FedEgo)",
    levels=("node",),
    model=build_fedego_net,
    check=refuse_node_sampling,
    description="ego-graph Mixup uploads, averaged reduction layers, server-trained SAGE mixed in"
                " by label-distribution EMD"))
