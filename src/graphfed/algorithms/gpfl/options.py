"""GPFL's options: the paper's defaults as its authors' code runs them, every ablation switch of
§4.3 (spec ``shared/specs/gpfl.md`` §5) and the places where the paper and the code differ."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from graphfed.algorithms.registry import RunView
from graphfed.data.properties import EntropyForm
from graphfed.protocol import AlgorithmOptions

DegreeFeature = Literal["code", "full"]
# the message names both sides use: the update (one tensor per parameter), the functional
# embedding and the property vector of the setup exchange
UPDATE, EMBEDDING, PROPERTY_VECTOR = "update.", "embedding", "properties"


class GPFLOptions(AlgorithmOptions):
    network_weight: float = Field(
        0.95, ge=0.0, le=1.0, description="g, the weight of the network term: theta_i <- "
        "theta_i + (1-g) dtheta_i + g (N dTheta)_i, i.e. W = (1-g) I + g N. Code: 0.95 "
        "(serveralpha, server.py graph_update). The paper's Eq. 4 writes W = gamma I + "
        "(1-gamma) Normalize(A) with gamma = 0.95; its gamma is 1 - g, so the paper's text "
        "taken literally is network_weight=0.05")
    beta: float = Field(0.95, ge=0.0, le=1.0, description="memory of the initial network, "
                        "Eq. 9: A_t = beta A_(t-1) + (1-beta) A_E (code: graph_rate = 1-beta)")
    sparsity_weight: float = Field(1.0, ge=0.0, description="lambda of the GAE's sparsity "
                                   "term, Eq. 7 (code: loss_gama)")
    threshold: float = Field(0.1, gt=0.0, description="Eq. 6's h as a share of the uniform "
                             "weight: h = threshold / k (code: dthresh)")
    discrete: Literal["thresh", "ratio", "none"] = Field(
        "thresh", description="how the GAE's row-softmax becomes the network: thresh (Eq. 6, "
        "entries >= h), ratio (the keep_ratio*k largest of each row), none (the softmax itself)")
    keep_ratio: float = Field(0.1, gt=0.0, le=1.0, description="discrete=ratio: share of a "
                              "row kept (code: dratio; at least one entry)")
    initial_graph: Literal["property", "random"] = Field(
        "property", description="A_0: property (selected graph properties, Eqs. 10-12) or "
        "random (entries U[0,1], the code's randomc)")
    learn: bool = Field(True, description="learn the network with the GAE (Eqs. 5-7); false: "
                        "aggregate along the normalised initial network A_t (ablation 'l' off)")
    update: bool = Field(True, description="refresh A_t with the functional-embedding "
                         "similarity every round (Eq. 9); false: keep A_0 (ablation 'u' off)")
    client_feature: Literal["marginal", "raw"] = Field(
        "marginal", description="GAE node features: marginal parameters (Eq. 8, parameters "
        "minus the clients' mean) or raw parameters (the 'without marginal parameters' "
        "ablation, Fig. 3); both pooled and L2-normalised")
    record_similarity: bool = Field(
        False, description="record every round the clients' cosine similarities of their raw "
        "and of their marginal features (pooled as for X_C) as raw_similarity and "
        "marginal_similarity (Fig. 3); training is unchanged")
    compress: Literal["avgpool100", "none"] = Field(
        "avgpool100", description="parameter vectors average-pooled with window floor(P/100) "
        "before the features are built (code: compress_dim=100) or used whole (paper Eq. 8)")
    init_norm: Literal["row", "sym"] = Field(
        "row", description="normalisation of A_t: row D^-1 A (what the code's 'sym' computes, "
        "gpfl/utils.py normalize) or the symmetric D^-1/2 A D^-1/2")
    property_standardize: bool = Field(
        False, description="z-score every property over clients before the similarity (the "
        "code's f2sim does not, so large-scale properties dominate)")
    entropy_form: EntropyForm = Field(
        "code", description="network entropy as the code computes it or as Eq. 10 prints it")
    random_graphs: int = Field(20, ge=1, description="R, graphs in the functional-embedding "
                               "batch")
    distinct_graphs: bool = Field(
        False, description="R different Erdos-Renyi graphs (seeds 0..R-1); false: the code's "
        "batch, one seed-0 graph repeated R times (gpfl/initial_graph.py random_graphbatch)")
    degree_feature: DegreeFeature = Field(
        "code", description="random-graph node features: one-hot of each node's number of "
        "higher-numbered neighbours (code: its adjacency holds each edge once) or of its degree;"
        " both clipped to d_x - 1")
    gae_epochs: int = Field(100, ge=1, description="GAE training epochs per round")
    gae_hidden: int = Field(128, ge=4, description="GAE hidden width (latent: hidden // 4)")
    gae_lr: float = Field(1e-3, gt=0.0, description="GAE Adam learning rate")
    gae_weight_decay: float = Field(5e-4, ge=0.0, description="GAE Adam weight decay")


def refuse_partial_participation(config: RunView) -> None:
    """GPFL learns one network over all k clients each round (marginal parameters are centred
    over every client, Eq. 8), so every client must take part in every round."""
    if config.client_fraction < 1.0:
        raise ValueError(f"gpfl learns a network over every client each round; it needs "
                         f"client_fraction=1, got {config.client_fraction}")
