"""The regression task: one real-valued target per graph (ESOL's log solubility), trained with
the mean squared error and scored in the target's own units.

* Target standardisation, per client: each client's ``TargetScale`` (mean and population
  standard deviation) comes from its own *training* targets only; its validation and test
  targets never enter it, and no statistic is shared between clients (a federated mean would
  leak every client's target distribution to the server). The model is trained on standardised
  targets; its predictions and the targets are de-standardised (``TargetScale.restore``) before
  any metric, so every number is in the target's units.
* Metrics of a split: ``mae`` (mean absolute error), ``rmse`` (root mean squared error),
  ``loss`` (the mean squared error, RMSE², so that ``min_val_loss`` picks the round of lowest
  pooled validation RMSE) and ``n``.
* Pooled over clients (``pooled_rmse`` and a sample-weighted MAE): over all clients' samples,
  MAE = Σ_i n_i MAE_i / Σ_i n_i and RMSE = sqrt(Σ_i n_i RMSE_i² / Σ_i n_i).

Targets tell the tasks apart: class labels are integers (or, as FedEgo's soft labels, rows
of class probabilities), regression targets one float per sample, link-prediction targets one
boolean per node pair (an edge or not, ``graphfed.linkpred``), so the training loss
(``mean_loss``; ``row_losses`` of the batched engine, which serves no link prediction) takes its
form from the batch's targets (``is_regression``, ``is_link``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from graphfed.reconstruction import reconstruction_loss

TASKS = ("classification", "regression")


@dataclass(frozen=True)
class TargetScale:
    """A client's target standardisation: z = (y − mean) / std, from its training targets."""

    mean: float
    std: float

    @classmethod
    def of(cls, train_targets: Tensor) -> TargetScale:
        """The scale of ``train_targets``; a std of 1 where they do not vary (one sample, or
        all equal), so that standardising only centres them."""
        values = train_targets.double()
        std = float(values.std(unbiased=False)) if len(values) > 1 else 0.0
        return cls(float(values.mean()), std if std > 0 else 1.0)

    def standardise(self, targets: Tensor) -> Tensor:
        return (targets - self.mean) / self.std

    def restore(self, standardised: Tensor) -> Tensor:
        return standardised * self.std + self.mean


def is_regression(targets: Tensor) -> bool:
    """Real-valued targets, one per sample: not class indices, nor soft labels (a probability
    row per sample, which the cross-entropy takes as they are)."""
    return targets.is_floating_point() and targets.dim() == 1


def is_link(targets: Tensor) -> bool:
    """Whether each target says of a node pair whether it is an edge (link prediction)."""
    return targets.dtype == torch.bool


def mean_loss(outputs: Tensor, targets: Tensor) -> Tensor:
    """A batch's training loss: the cross-entropy of class labels (indices or probability
    rows), the mean squared error of real-valued (standardised) targets against the model's
    single output, the binary cross-entropy of a pair's logit against whether it is an edge
    (of every pair against the adjacency matrix: GAE's ``reconstruction_loss``)."""
    if is_link(targets):
        if targets.dim() == 2:  # every pair's target: the whole adjacency (edges.loss=full)
            return reconstruction_loss(outputs, targets)
        return F.binary_cross_entropy_with_logits(outputs.view(-1), targets.to(outputs.dtype))
    if is_regression(targets):
        return F.mse_loss(outputs.view(-1), targets)
    return F.cross_entropy(outputs, targets)


def row_losses(outputs: Tensor, targets: Tensor) -> Tensor:
    """``mean_loss`` of each row (``outputs`` [rows, C], ``targets`` [rows]), for the batched
    engine's per-client means."""
    if is_regression(targets):
        return (outputs.view(-1) - targets) ** 2
    return F.cross_entropy(outputs, targets, reduction="none")


def regression_metrics(predictions: Tensor, targets: Tensor, scale: TargetScale
                       ) -> dict[str, float]:
    """``mae``, ``rmse``, ``loss`` (MSE) and ``n`` of standardised ``predictions`` against
    standardised ``targets``, both de-standardised by ``scale`` first."""
    return many_regression_metrics([(predictions, targets, scale)])[0]


def many_regression_metrics(scored: Sequence[tuple[Tensor, Tensor, TargetScale]]
                            ) -> list[dict[str, float]]:
    """``regression_metrics`` of each (predictions, targets, scale) set, with one read of the
    device for them all."""
    if not scored:
        return []
    sums = torch.stack([
        torch.stack([errors.abs().sum(), (errors * errors).sum()])
        for errors in (scale.restore(pred.double().view(-1)) - scale.restore(target.double())
                       for pred, target, scale in scored)]).cpu().tolist()
    out = []
    for (absolute, squared), (_, target, _) in zip(sums, scored, strict=True):
        n = len(target)
        mse = squared / n
        out.append({"mae": absolute / n, "rmse": math.sqrt(mse), "loss": mse, "n": n})
    return out


def pooled_rmse(rmses: Sequence[float], counts: Sequence[int]) -> float:
    """The RMSE over every sample of several sets from each set's RMSE and size."""
    return math.sqrt(sum(r * r * n for r, n in zip(rmses, counts, strict=True)) / sum(counts))
