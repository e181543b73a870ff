"""FGFL's options: the paper's defaults, every ablation switch of its Table 4 and the choices
where the paper and its authors' code differ (``shared/specs/fgfl.md`` §3, §5)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from graphfed.algorithms.rewards.base import RewardOptions


class FGFLOptions(RewardOptions):
    alpha1: float = Field(0.05, ge=0.0, description="weight of this round in the value update")
    alpha2: float = Field(1.0, ge=0.0, description="weight of diversity relative to alignment")
    proto_weight: float = Field(0.1, ge=0.0, description="lambda of the prototype regulariser")
    budget: float = Field(1.0, gt=0.0, description="payoff budget B per round")
    keep_fraction: float = Field(0.9, gt=0.0, le=1.0, description="beta_s of TF-IDF filtering")
    max_ring: int = Field(4, ge=3, le=4, description="longest ring kept as a motif")
    value_update: Literal["additive", "ema"] = "additive"
    use_alignment: bool = Field(True, description="ablation: drop phi from Eq. 10")
    use_diversity: bool = Field(True, description="ablation: alpha2 = 0")
    value_weighted_agg: bool = Field(True, description="ablation: size-weighted aggregate")
    use_prototypes: bool = Field(True, description="ablation: no prototypes, lambda = 0")
    proto_distance: Literal["mse", "l2"] = "mse"
    proto_reduce: Literal["mean", "sum"] = "mean"
    proto_scope: Literal["batch", "dataset"] = "batch"
    proto_from_train_pass: bool = Field(
        False, description="prototypes from embeddings seen during training (code) instead of "
        "an eval-mode pass after it")
    proto_weights: Literal["value", "per_motif_rep"] = "value"
    init_proto: Literal["mean", "count_weighted", "count_weighted_paper_eq19"] = "count_weighted"
    exact_shapley: bool = Field(
        False, description="also compute the exact gradient-Shapley value (2^N coalitions)")
