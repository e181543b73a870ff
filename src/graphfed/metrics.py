"""Metrics as tensor ops: accuracy, micro/macro F1, and fairness across clients."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor


def classification_metrics(logits: Tensor, target: Tensor, num_classes: int,
                           majority: int | None = None) -> dict[str, float]:
    """Accuracy, mean cross-entropy, micro-F1 and macro-F1 (over classes present in the targets
    or the predictions, as scikit-learn averages) and the sample count ``n``.

    With a ``majority`` class (the client's training majority) also ``minority_n``, the samples
    of any other class, and ``minority_acc``, the accuracy on them (absent when there are none:
    no number is better than a made-up 0 or 1)."""
    return many_classification_metrics([(logits, target, majority)], num_classes)[0]


def many_classification_metrics(scored: Sequence[tuple[Tensor, Tensor, int | None]],
                                num_classes: int) -> list[dict[str, float]]:
    """``classification_metrics`` of each (logits, targets, majority) set, all in one pass over
    their joined rows and one read of the device (``joined_classification_metrics``): a round's
    evaluation scores each client's splits, which one at a time cost a dozen operations and a
    device read each."""
    if not scored:
        return []
    target = torch.cat([one[1] for one in scored])
    return joined_classification_metrics(
        torch.cat([one[0] for one in scored]), target,
        Segments.of([len(one[1]) for one in scored], target.device),
        [one[2] for one in scored], num_classes)


@dataclass(frozen=True)
class Segments:
    """Consecutive sets of rows: how many rows each set has, and each row's set. Built once
    where the same sets are scored every round (``batched_eval``'s joined clients)."""

    sizes: list[int]
    of_row: Tensor

    @classmethod
    def of(cls, sizes: list[int], device: torch.device) -> Segments:
        of_row = torch.repeat_interleave(torch.arange(len(sizes), device=device),
                                         torch.tensor(sizes, dtype=torch.long, device=device),
                                         output_size=sum(sizes))
        return cls(sizes, of_row)


def joined_classification_metrics(logits: Tensor, target: Tensor, segments: Segments,
                                  majorities: Sequence[int | None], num_classes: int
                                  ) -> list[dict[str, float]]:
    """``classification_metrics`` of each of ``segments``' sets of rows of ``logits`` and
    ``target`` (with its ``majorities`` entry): every confusion matrix from one count, every
    loss from one sum, one read of the device."""
    c, sets = num_classes, len(segments.sizes)
    segment = segments.of_row
    confusion = torch.bincount((segment * c + target) * c + logits.argmax(1),
                               minlength=sets * c * c)
    losses = torch.bincount(segment, F.cross_entropy(logits, target, reduction="none").double(),
                            minlength=sets)
    # the rest on C x C arrays in NumPy: a dozen tiny torch operations cost more than the pass
    read = torch.cat([confusion.double(), losses]).cpu().numpy()
    confusions = read[:-sets].reshape(sets, c, c)
    loss_sums = read[-sets:]
    return [_metrics(confusion, float(loss), n, majority) for confusion, loss, n, majority
            in zip(confusions, loss_sums, segments.sizes, majorities, strict=True)]


def _metrics(confusion: np.ndarray, loss_sum: float, n: int, majority: int | None
             ) -> dict[str, float]:
    """``classification_metrics`` from a set's confusion matrix (targets by rows, predictions
    by columns, float64) and its summed cross-entropy."""
    tp = confusion.diagonal()
    fp = confusion.sum(0) - tp
    fn = confusion.sum(1) - tp
    present = (confusion.sum(0) + confusion.sum(1)) > 0
    f1 = 2 * tp[present] / np.maximum(2 * tp + fp + fn, 1)[present]
    acc = float(tp.sum() / max(n, 1))
    out = {
        "acc": acc,
        "loss": loss_sum / n if n else float("nan"),
        "micro_f1": acc,  # single-label multi-class: micro-F1 equals accuracy
        "macro_f1": float(f1.mean()) if present.any() else 0.0,
        "n": n,
    }
    if majority is not None:
        minority_n = int(confusion.sum() - confusion[majority].sum())
        out["minority_n"] = minority_n
        if minority_n:
            out["minority_acc"] = float((tp.sum() - tp[majority]) / minority_n)
    return out


def majority_class(labels: Tensor) -> int | None:
    """The most frequent label, the smallest on a tie; None without labels."""
    if not len(labels):
        return None
    counts = torch.bincount(labels)
    return int(torch.nonzero(counts == counts.max())[0])


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and population standard deviation (NaN for an empty sequence)."""
    if not values:
        return float("nan"), float("nan")
    t = torch.tensor(values, dtype=torch.float64)
    return float(t.mean()), float(t.std(unbiased=False))


def variance(values: Sequence[float]) -> float:
    """Population variance (1/N) Σ (v_i − v̄)² across clients (q-FFL's fairness measure;
    lower is fairer)."""
    return float(torch.tensor(values, dtype=torch.float64).var(unbiased=False))


def entropy(values: Sequence[float]) -> float:
    """−Σ p_i log p_i of the values normalised to a distribution, p_i = v_i / Σ_j v_j (natural
    log, so at most log N for N values; higher is more uniform, fairer); negative values count
    as 0, and NaN when nothing is left or a value is NaN (a diverged client's loss: the
    normalisation would otherwise drop every value and report 0)."""
    t = torch.tensor(values, dtype=torch.float64).clamp_min(0)
    if bool(t.isnan().any()) or t.sum() <= 0:
        return float("nan")
    p = t / t.sum()
    p = p[p > 0]
    return float(-(p * p.log()).sum())


def pearson(a: Sequence[float], b: Sequence[float]) -> float:
    """Pearson correlation, e.g. per-client Local vs federated accuracy (model-gradient fairness);
    NaN when either side is constant."""
    x = torch.tensor(a, dtype=torch.float64)
    y = torch.tensor(b, dtype=torch.float64)
    if len(x) != len(y) or len(x) < 2:
        raise ValueError("pearson needs two sequences of the same length >= 2")
    x, y = x - x.mean(), y - y.mean()
    denom = math.sqrt(float((x * x).sum() * (y * y).sum()))
    return float((x * y).sum() / denom) if denom > 0 else float("nan")


def client_summary(per_client: Sequence[dict[str, float]], key: str) -> dict[str, float]:
    """Mean, std, variance and entropy of one per-client metric."""
    values = [c[key] for c in per_client]
    mean, std = mean_std(values)
    return {key: mean, f"{key}_std": std, f"{key}_var": variance(values),
            f"{key}_entropy": entropy(values)}


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (average ranks on ties): Pearson on the ranks."""
    return pearson(_ranks(a), _ranks(b))


def _ranks(values: Sequence[float]) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    order = torch.argsort(t)
    ranks = torch.empty_like(t)
    ranks[order] = torch.arange(len(t), dtype=torch.float64)
    for value in t.unique():  # ties share their mean rank
        tied = t == value
        ranks[tied] = ranks[tied].mean()
    return ranks.tolist()
