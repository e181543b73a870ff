"""The link-prediction task (``level: edge``): how a client's edge scores become its metrics,
and how the run pools them over clients.

A split's scores are the decoder's logits of its supervision pairs, the positive edges (target
True) and the split's negative pairs (target False): ``graphfed.data.edges`` says which pairs
those are. Per split (``link_metrics``):

* ``auc``: the ROC-AUC of the scores, ties counting half (``metrics.roc_auc``);
* ``ap``: average precision, Σ_t (R_t − R_{t−1}) P_t over the distinct scores t, high to low,
  as scikit-learn's ``average_precision_score`` (tied scores enter together);
* ``hits@K`` (K in ``HITS_AT``): OGB's definition, the share of positive pairs scored strictly
  above the K-th highest negative score; 1 where the split has fewer than K negatives (OGB's
  convention: nothing outranks them);
* ``mrr``: each positive ranked among the split's negatives, 1 / (1 + #negatives scoring at
  least as high), averaged over the positives;
* ``loss``: the binary cross-entropy with logits over the positive and negative pairs (their
  mean), the loss the clients train with under ``edges.loss: sampled`` (under ``full`` they
  train on GAE's reconstruction of every pair, ``graphfed.reconstruction``);
* ``n``: the number of positive pairs (supervision edges), which weighs the split when pooled.

Pooled over clients (``s_<metric>_pooled`` in a summary): the mean of the clients' values
weighted by their positive pairs ``n``. It is *not* the metric of all clients' pairs ranked
together: that needs every client's scores, which an evaluation record does not carry (see the
ROC-AUC paragraph of ``graphfed.evaluation``); for the loss (a mean over pairs, one negative per
positive) the weighted mean is the pooled mean.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from graphfed.metrics import roc_auc
from graphfed.regression import mean_loss

HITS_AT = (20, 50, 100)
RANKING = ("auc", "ap", *(f"hits@{k}" for k in HITS_AT), "mrr")  # each in [0, 1]


def average_precision(scores: np.ndarray, positive: np.ndarray) -> float:
    """Σ_t (R_t − R_{t−1}) P_t over the distinct ``scores`` t from the highest: recall and
    precision of the pairs scoring at least t. ``positive`` must hold a True."""
    order = np.argsort(-scores, kind="stable")
    ranked, hits = scores[order], positive[order]
    last = np.r_[ranked[1:] != ranked[:-1], True]  # the last pair of each run of tied scores
    true_pos = np.cumsum(hits)[last]
    precision = true_pos / (np.flatnonzero(last) + 1)
    recall_gain = np.diff(np.r_[0, true_pos]) / true_pos[-1]
    return float((recall_gain * precision).sum())


def hits_at(pos: np.ndarray, neg: np.ndarray, k: int) -> float:
    """Share of ``pos`` scores strictly above the ``k``-th highest of ``neg`` (1 with fewer than
    ``k`` negatives)."""
    if len(neg) < k:
        return 1.0
    kth = np.partition(neg, len(neg) - k)[len(neg) - k]
    return float((pos > kth).mean())


def mean_reciprocal_rank(pos: np.ndarray, neg: np.ndarray) -> float:
    """Mean over ``pos`` of 1 / (1 + #``neg`` scores >= it)."""
    at_least = len(neg) - np.searchsorted(np.sort(neg), pos, side="left")
    return float((1.0 / (1.0 + at_least)).mean())


def link_metrics(logits: Tensor, targets: Tensor) -> dict[str, float]:
    """The metrics of one split's pair ``logits`` and boolean ``targets`` (True: an edge); the
    split must hold a positive and a negative pair."""
    return many_link_metrics([(logits, targets)])[0]


def many_link_metrics(scored: Sequence[tuple[Tensor, Tensor]]) -> list[dict[str, float]]:
    """``link_metrics`` of each (logits, targets) set, their scores, targets and losses read
    from the device once for all sets."""
    if not scored:
        return []
    losses = torch.stack([mean_loss(logits, targets).double() for logits, targets in scored])
    cuts = np.cumsum([len(targets) for _, targets in scored])[:-1]
    scores = np.split(torch.cat([logits.detach().double().view(-1) for logits, _ in scored])
                      .cpu().numpy(), cuts)
    labels = np.split(torch.cat([targets for _, targets in scored]).cpu().numpy(), cuts)
    out = []
    for score, positive, loss in zip(scores, labels, losses.cpu().tolist(), strict=True):
        pos, neg = score[positive], score[~positive]
        auc = roc_auc(score, positive)
        if auc is None:
            raise ValueError("a link split needs positive and negative pairs to be scored")
        out.append({"auc": auc, "ap": average_precision(score, positive),
                    **{f"hits@{k}": hits_at(pos, neg, k) for k in HITS_AT},
                    "mrr": mean_reciprocal_rank(pos, neg), "loss": loss, "n": len(pos)})
    return out
