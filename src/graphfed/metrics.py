"""Metrics as tensor ops: accuracy, micro/macro F1, ROC-AUC of binary tasks, and fairness
across clients."""

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
    or the predictions, as scikit-learn averages) and the sample count ``n``; of a binary task
    (``num_classes`` 2) also ``roc_auc`` of the positive-class score (``positive_score``),
    absent where the targets hold one class only.

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
    parts = [confusion.double(), losses]
    if c == 2:  # each row's positive-class score and label, for the ROC-AUC, in the same read
        parts += [positive_score(logits).double(), target.double()]
    # the rest on C x C arrays in NumPy: a dozen tiny torch operations cost more than the pass
    read = torch.cat(parts).cpu().numpy()
    confusions = read[:sets * c * c].reshape(sets, c, c)
    loss_sums = read[sets * c * c:sets * c * c + sets]
    aucs: list[float | None] = [None] * sets
    if c == 2:
        scores, labels = np.split(read[sets * c * c + sets:], 2)
        ends = np.cumsum(segments.sizes)
        aucs = [roc_auc(s, y == 1) for s, y in zip(np.split(scores, ends[:-1]),
                                                    np.split(labels, ends[:-1]), strict=True)]
    return [_metrics(confusion, float(loss), n, majority, auc)
            for confusion, loss, n, majority, auc
            in zip(confusions, loss_sums, segments.sizes, majorities, aucs, strict=True)]


def positive_score(logits: Tensor) -> Tensor:
    """A binary task's score of class 1 per row: the logit margin over class 0, which orders
    the rows as the positive-class probability (its sigmoid) does, without the probability's
    float32 saturation turning confident rows into ties."""
    return logits[:, 1] - logits[:, 0]


def roc_auc(scores: np.ndarray, positive: np.ndarray) -> float | None:
    """Area under the ROC curve of ``scores`` for the rows marked ``positive``: the share of
    (positive, negative) pairs whose positive scores higher, a tie counting half (the
    Mann-Whitney U over n_pos x n_neg, from average ranks). None where one class is absent:
    there is no pair to rank, and a made-up 0.5 would pass for a coin-flip model."""
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if not n_pos or not n_neg:
        return None
    _, value_of, counts = np.unique(scores, return_inverse=True, return_counts=True)
    # the 1-based rank of a value's rows: the rows below it plus the mean place among its ties
    ranks = (np.cumsum(counts) - counts + (counts + 1) / 2)[value_of]
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _metrics(confusion: np.ndarray, loss_sum: float, n: int, majority: int | None,
             auc: float | None) -> dict[str, float]:
    """``classification_metrics`` from a set's confusion matrix (targets by rows, predictions
    by columns, float64), its summed cross-entropy and its ROC-AUC (None: not recorded)."""
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
    if auc is not None:
        out["roc_auc"] = auc
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


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """The two-sided Student-t confidence interval of the mean, x̄ ± t_{(1+level)/2, n−1} · s/√n
    with s the sample standard deviation: right for the few seeds a table pools, where the
    normal interval would be too narrow. None below two values (no spread to measure)."""
    from scipy import stats

    if len(values) < 2:
        return None
    sample = np.asarray(values, dtype=np.float64)
    mean = float(sample.mean())
    half = float(stats.t.ppf((1 + level) / 2, len(sample) - 1)
                 * sample.std(ddof=1) / math.sqrt(len(sample)))
    return mean - half, mean + half


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
