"""FedSpray's options (spec ``shared/specs/fedspray.md`` §3.1, §5, §6; §7 wins where they differ),
its two named profiles, the message names both sides use, and the run-level pieces the registry
takes: the backbone (the authors' GNNs have no dropout, §7.1-3) and the GNN's optimiser.

The profiles settle where the paper and the authors' code (``xbfu/FedSpray``) disagree (§7.5 S1):

* ``paper``: λ1 = 5, labelled nodes' proxies from the global class proxies (Alg. 1 line 4), the
  local projector g_q loaded from the global g_q, PyG's initialisation of each client's GNN;
* ``code``: λ1 = 1 (``main.py:36``), persistent per-node labelled proxies, g_q loaded from the
  global **g_p** (the code's slip, ``client.py:52``), every GNN parameter drawn U(0, 1) per client.

A profile fills only the options a run leaves unset, so ``fedspray.profile=code
fedspray.lambda1=5`` is the code with the paper's λ1. Rounds are a run setting, not an option:
the paper trains 300 rounds, the code 500 (``rounds=300`` / ``rounds=500``); both run E = 5
local epochs per phase (``local_epochs=5``). The run's ``optimizer.*`` does not apply: FedSpray
trains three Adam optimisers of its own (``gnn_lr``, ``encoder_lr``, ``proxy_lr``; no weight
decay), each kept across rounds in the client's state as the code does.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator
from torch import nn

from graphfed.algorithms.registry import RunView
from graphfed.models.by_level import build_model
from graphfed.models.gnn import ModelOptions
from graphfed.protocol import AlgorithmOptions
from graphfed.training import OptimizerOptions

Profile = Literal["paper", "code"]
# message names: the encoder's parameters (one tensor each, under this prefix), the class
# proxies (global down, the client's local class means up), the client's class ratios (setup)
ENCODER = "encoder."
PROXIES = "proxies"
CLASS_RATIOS = "class_ratios"

PROFILES: dict[str, dict[str, Any]] = {
    "paper": {"lambda1": 5.0, "labeled_proxy_mode": "global_class",
              "projector_init": "global_projector", "gnn_init": "pyg"},
    "code": {"lambda1": 1.0, "labeled_proxy_mode": "per_node_persistent",
             "projector_init": "global_classifier", "gnn_init": "uniform01"},
}


class FedSprayOptions(AlgorithmOptions):
    profile: Profile = Field("paper", description="paper or code: fills lambda1, "
                             "labeled_proxy_mode, projector_init and gnn_init where unset")
    lambda1: float = Field(5.0, ge=0.0, description="KD weight into the GNN, Eq. 7 (paper 5; "
                           "code 1; Fig. 4 recommends 10 for PubMed+SAGE); 0 is Local training")
    lambda2: float = Field(1.0, ge=0.0, description="KD weight into the encoder, Eq. 13 "
                           "(paper and code 1)")
    proxy_dim: int = Field(64, ge=1, description="d_s, the proxy and feature-embedding width "
                           "(Fig. 5 sweeps 4..256)")
    zero_proxies: bool = Field(False, description="S = 0 (Table 3's ablation): every proxy is "
                               "zero, so the soft target p = g_p(g_e(x)) reads features only; "
                               "no proxy is trained or sent")
    combine: Literal["add", "concat"] = Field(
        "add", description="how g_p reads a node's embedding and proxy: e + s (paper's example, "
        "code) or [e, s] (the code's commented-out variant; g_p then reads 2 d_s)")
    kd_nodes: Literal["confident", "all"] = Field(
        "confident", description="nodes of the GNN's KD term: the labelled nodes plus the "
        "unlabelled ones whose projector confidence max q exceeds conf_threshold (code, "
        "client.py:53-56) or every node of the client (paper, Eq. 6)")
    conf_threshold: float = Field(0.7, ge=0.0, le=1.0, description="the confident set's "
                                  "threshold on max q (code: 0.7)")
    labeled_proxy_mode: Literal["global_class", "per_node_persistent"] = Field(
        "global_class", description="RECONSTRUCTED: a labelled node's proxy each round: the "
        "global proxy of its class (paper, Alg. 1 line 4) or its own proxy kept across rounds "
        "(code; the global S then reaches training through unlabelled nodes only)")
    projector_init: Literal["global_projector", "global_classifier"] = Field(
        "global_projector", description="what the local g_q starts phase 2 from: the global "
        "g_q (paper) or the global g_p (code's slip, client.py:52; needs combine=add)")
    gnn_init: Literal["pyg", "uniform01"] = Field(
        "pyg", description="each client's GNN: the run's shared initial model, PyG's "
        "initialisation (paper silent; graphfed convention, §7.5 S5) or every parameter drawn "
        "U(0, 1) by each client (code, model.py:76-78)")
    gnn_dropout: float | None = Field(0.0, ge=0.0, lt=1.0, description="dropout of the GNN "
                                      "(the authors' GNNs have none, §7.1-3); unset: the run's "
                                      "model.dropout")
    proxy_weighting: Literal["class_ratio", "uniform", "size"] = Field(
        "class_ratio", description="server weights of class j's proxy: the clients' training "
        "ratios of class j (Eq. 15), equal, or their labelled-node counts; in all three only "
        "clients with labelled class-j nodes count")
    node_proxy_init: float = Field(0.1, description="RECONSTRUCTED: the constant every per-node "
                                   "proxy starts at in per_node_persistent mode (code 0.1; the "
                                   "paper never initialises them)")
    global_proxy_step: float = Field(0.01, description="RECONSTRUCTED: the initial global S has "
                                     "row j equal to global_proxy_step * j (code server.py:26; "
                                     "0 gives all-zero initial proxies; the paper is silent)")
    gnn_lr: float = Field(0.003, gt=0.0, description="Adam rate of the GNN (paper, code)")
    encoder_lr: float = Field(0.003, gt=0.0, description="Adam rate of the encoder (paper, "
                              "code)")
    proxy_lr: float = Field(0.02, gt=0.0, description="Adam rate of the proxies (paper, code)")

    @model_validator(mode="before")
    @classmethod
    def _apply_profile(cls, data: Any) -> Any:
        """Fill the profile's values into the options the run left unset."""
        if not isinstance(data, dict):
            return data
        profile = data.get("profile", "paper")
        return {**PROFILES.get(profile, {}), **data}

    @model_validator(mode="after")
    def _projector_fits(self) -> FedSprayOptions:
        if self.projector_init == "global_classifier" and self.combine == "concat":
            raise ValueError("projector_init=global_classifier copies g_p into g_q, which "
                             "needs combine=add (with concat g_p reads 2*proxy_dim inputs)")
        return self


def require_full_batch_nodes(run: RunView) -> None:
    """FedSpray trains full-batch on each client's whole graph (the code: one step per epoch):
    no neighbour sampling (its ``levels`` keep it to node level)."""
    if run.sampling.fanouts:
        raise ValueError("fedspray trains full-batch on each client graph; unset "
                         "sampling.fanouts")


def fedspray_backbone(level: str, in_dim: int, num_classes: int, model: ModelOptions,
                      options: FedSprayOptions) -> nn.Module:
    """The run's backbone (``model.name``: gcn, sgc, sage, ...) with FedSpray's dropout."""
    if options.gnn_dropout is not None:
        model = model.model_copy(update={"dropout": options.gnn_dropout})
    return build_model(level, in_dim, num_classes, model)


def fedspray_optimizer(run: OptimizerOptions, options: FedSprayOptions) -> OptimizerOptions:
    """The GNN's optimiser: Adam at ``gnn_lr``, no weight decay, kept across rounds (code)."""
    return OptimizerOptions(name="adam", lr=options.gnn_lr, weight_decay=0.0, persistent=True)
