"""What every attack shares: the ROC of its scores, its AUC and TPR at 1 % FPR, a result with
the threat model it ran under, balanced candidate sets, and the per-sample quantities attacks
read off a model's logits (loss, logit-scaled confidence, posteriors)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from graphfed.metrics import roc_auc

LOW_FPR = 0.01  # the false-positive rate a TPR is reported at (Carlini et al. 2022)


@dataclass(frozen=True)
class Roc:
    """An ROC curve: the false- and true-positive rates at every distinct threshold, from
    (0, 0) (nothing flagged) to (1, 1) (everything flagged)."""

    fpr: np.ndarray
    tpr: np.ndarray


def roc_curve(scores: np.ndarray, positive: np.ndarray) -> Roc:
    """The ROC of ``scores`` (higher: more likely positive). Tied scores move together, one
    point per distinct value: no order among equal scores is made up."""
    order = np.argsort(-scores, kind="stable")
    ranked, hits = scores[order], positive[order].astype(np.float64)
    last_of_value = np.r_[np.nonzero(np.diff(ranked))[0], len(ranked) - 1]
    tp = np.cumsum(hits)[last_of_value]
    fp = np.cumsum(1 - hits)[last_of_value]
    n_pos, n_neg = max(hits.sum(), 1), max(len(hits) - hits.sum(), 1)
    return Roc(np.r_[0.0, fp / n_neg], np.r_[0.0, tp / n_pos])


def tpr_at_fpr(roc: Roc, fpr: float = LOW_FPR) -> float:
    """The largest TPR a threshold reaches with FPR <= ``fpr`` (no interpolation between
    points: a rate between two thresholds is not reachable without randomising)."""
    return float(roc.tpr[roc.fpr <= fpr].max())


@dataclass(frozen=True)
class AttackResult:
    """One attack's outcome: AUC and TPR at 1 % FPR of its scores on ``members`` positives
    and ``non_members`` negatives, its ROC, and what the attacker was given."""

    attack: str
    auc: float
    tpr_at_1pct_fpr: float
    members: int
    non_members: int
    threat_model: str
    roc: Roc

    def row(self) -> dict[str, object]:
        """The result as ``--json`` and ``audit.json`` write it."""
        return {"attack": self.attack, "auc": self.auc, "tpr_at_1pct_fpr": self.tpr_at_1pct_fpr,
                "members": self.members, "non_members": self.non_members,
                "threat_model": self.threat_model}


def attack_result(attack: str, scores: np.ndarray, positive: np.ndarray,
                  threat_model: str) -> AttackResult:
    """Score an attack: ``scores`` of candidates, ``positive`` marking the true members."""
    auc = roc_auc(scores, positive)
    if auc is None:
        raise ValueError(f"{attack}: needs both members and non-members to score")
    roc = roc_curve(scores, positive)
    n_pos = int(positive.sum())
    return AttackResult(attack, auc, tpr_at_fpr(roc), n_pos, len(positive) - n_pos,
                        threat_model, roc)


def balanced_rows(n_members: int, n_non_members: int, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray]:
    """As many members as non-members, the larger side subsampled by ``rng``: the positions
    chosen in each set, sorted. Balanced sets keep the AUC and a low-FPR TPR comparable across
    clients whose splits differ in size."""
    k = min(n_members, n_non_members)
    return (np.sort(rng.choice(n_members, k, replace=False)),
            np.sort(rng.choice(n_non_members, k, replace=False)))


def sample_losses(logits: Tensor, targets: Tensor) -> Tensor:
    """Each sample's cross-entropy under the model (the loss-threshold attack's signal)."""
    return F.cross_entropy(logits.double(), targets, reduction="none")


def logit_confidence(logits: Tensor, targets: Tensor) -> Tensor:
    """log(p / (1 - p)) of each sample's true class, computed as z_y - logsumexp_{j != y} z_j
    so that a confident model's p near 1 does not round to an infinite value (LiRA's
    statistic, which is close to Gaussian across models)."""
    z = logits.double()
    true = z.gather(1, targets.view(-1, 1)).view(-1)
    others = z.scatter(1, targets.view(-1, 1), float("-inf"))
    return true - torch.logsumexp(others, dim=1)


def posteriors(logits: Tensor) -> Tensor:
    """The class probabilities a black-box query of the model returns."""
    return torch.softmax(logits.double(), dim=1)
