"""FedEgo's options (paper defaults; every ablation of its Tables 4-8 as a switch) and the split
of a client model into reduction layers Θ and personalisation layers Φ."""

from __future__ import annotations

from typing import Literal

from pydantic import Field
from torch import Tensor

from graphfed.mechanisms.updates import under_prefix, with_prefix
from graphfed.protocol import AlgorithmOptions
from graphfed.tensors import Params

REDUCTION, PERSONAL = "reduction.", "personal."


class FedEgoOptions(AlgorithmOptions):
    hops: int = Field(2, ge=1, description="ego-graph depth k")
    fanout: int = Field(6, ge=1, description="neighbours sampled per node and hop (replacement)")
    ego: bool = Field(True, description="ego-graph personalisation layers; false: FedEgo w/o "
                      "EGO (SAGE reduction layers, MLP personalisation, centre uploads)")
    mixup: bool = Field(True, description="upload the batch mean of aligned ego-graphs; false: "
                        "the batch's first ego-graph (FedEgo w/o Mixup)")
    linear: bool = Field(False, description="no activation between the SAGE layers "
                         "(FedEgo-Linear)")
    linear_last_relu: bool = Field(
        True, description="with linear: keep the ReLU after the last SAGE layer (code, "
        "models.py GNNLayer) or drop it, no activation at all (paper §4.1.3, Eq. 9 and "
        "Theorem 4.1)")
    sage_weights: Literal["separate", "shared"] = Field(
        "separate", description="SAGE layers: PyG SAGEConv, a biased W_l on the neighbour mean "
        "and a W_r on the node (code, models.py) or one bias-free W on both, "
        "W (p_v + mean p_u) (paper Eq. 9)")
    mash_from: Literal["after_training", "training_batches"] = Field(
        "after_training", description="mashed ego-graphs from fresh batches of all training "
        "nodes after the local epochs, with the trained Θ_i in eval mode (code, Client.py "
        "getShareBatch after supervisedTrain) or from every training batch of every epoch "
        "with the Θ_i of that step (paper Algorithm 1, lines 5-12)")
    label_distribution_from: Literal["all", "train"] = Field(
        "all", description="the client's P_i for λ_i from all its nodes' labels, local test "
        "nodes included (code, Client.py setLamb) or from its training nodes only (ours: "
        "the paper's Eq. 3 says 'local dataset' and does not settle whether test labels "
        "count)")
    average_reduction: bool = Field(True, description="average Θ (false: FedEgo w/o RL)")
    lambda_mode: Literal["adaptive", "fixed"] = "adaptive"
    lambda_value: float = Field(0.5, ge=0.0, le=1.0, description="λ when lambda_mode=fixed "
                                "(0: w/o PL, 1: FedEgo-Server)")
    gamma: float = Field(0.5, gt=0.0, description="λ_i = (EMD_i / 2)^γ")
    noise_sigma: float = Field(0.0, ge=0.0, description="Gaussian noise std added to uploaded "
                               "mashed embeddings")
    server_epochs: int = Field(5, ge=0)
    server_fraction: float = Field(
        0.2, gt=0.0, le=1.0, description="share of the mashed graphs each server epoch trains "
        "on: 0.2 (code, Server.py) or 1.0, every uploaded graph (paper Algorithm 1, lines "
        "24-32)")
    server_lr: float = Field(3e-4, gt=0.0)
    server_resample: bool = Field(False, description="resample each mashed tree's children with "
                                  "replacement on the server, as FedEgo's code does")
    eval_sampling: Literal["sampled", "full"] = Field(
        "sampled", description="evaluate on sampled ego-graphs (code) or the full neighbourhood")


def split_params(params: Params) -> tuple[Params, Params]:
    """(Θ, Φ): the reduction layers and the personalisation layers, names without prefix."""
    return under_prefix(params, REDUCTION), under_prefix(params, PERSONAL)


def join_params(theta: Params, phi: Params) -> Params:
    return {**with_prefix(theta, REDUCTION), **with_prefix(phi, PERSONAL)}


def mixing_weight(own: Tensor, global_: Tensor, options: FedEgoOptions) -> float:
    """λ_i = (EMD_i / 2)^γ with EMD_i = Σ_c |P_i(c) − P_g(c)| ∈ [0, 2], or the fixed λ."""
    if options.lambda_mode == "fixed":
        return options.lambda_value
    emd = float((own.double() - global_.double()).abs().sum())
    return min(max(emd / 2.0, 0.0), 1.0) ** options.gamma
