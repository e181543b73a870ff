"""Whether a learned client network links clients with similar label distributions (GPFL's
Fig. 5 claim, measured rather than eyeballed).

Two numbers over the client pairs i != j of a k x k network W and the clients' label
distributions P (k x C, rows summing to 1):

* ``ratio``: the mean weight W_ij within label groups over the mean weight between them, a
  client's group being its majority label; 1 for a network blind to the labels.
* ``correlation``: the Pearson correlation of W_ij with the pair's label similarity
  1 - TV(P_i, P_j) (total variation); 0 for a blind network, NaN for a constant one.
"""

from __future__ import annotations

import torch
from torch import Tensor

from graphfed.metrics import pearson


def label_distributions(labels: list[Tensor], num_classes: int) -> Tensor:
    """Each client's share of every class (k x C); a client without labels gets zeros."""
    counts = torch.stack([torch.bincount(y.long(), minlength=num_classes).double()
                          for y in labels])
    return counts / counts.sum(dim=1, keepdim=True).clamp(min=1)


def label_similarity(distributions: Tensor) -> Tensor:
    """1 - total variation distance between every two clients' label distributions."""
    return 1 - 0.5 * (distributions[:, None, :] - distributions[None, :, :]).abs().sum(-1)


def label_order(distributions: Tensor) -> list[int]:
    """Clients grouped by majority label, most skewed first within a group, so a network that
    follows the labels shows as diagonal blocks."""
    top, group = distributions.max(dim=1)
    return sorted(range(len(distributions)), key=lambda i: (int(group[i]), -float(top[i]), i))


def grouping(network: Tensor, distributions: Tensor, groups: Tensor | None = None
             ) -> dict[str, float]:
    """The within/between mean weight ``ratio`` and the weight/similarity ``correlation``
    (module docstring), with the two means they come from; ``groups``: each client's group
    where it is known (e.g. a split's), instead of its majority label."""
    k = len(network)
    if network.shape != (k, k) or len(distributions) != k:
        raise ValueError(f"a {tuple(network.shape)} network for {len(distributions)} clients")
    weights = network.double()
    off = ~torch.eye(k, dtype=torch.bool)
    group = distributions.argmax(dim=1) if groups is None else groups
    same = (group[:, None] == group[None, :]) & off
    between = ~same & off
    within_mean, between_mean = _mean(weights[same]), _mean(weights[between])
    return {"within": within_mean, "between": between_mean,
            "ratio": within_mean / between_mean if between_mean > 0 else float("nan"),
            "correlation": pearson(weights[off].tolist(),
                                   label_similarity(distributions)[off].tolist())}


def _mean(values: Tensor) -> float:
    return float(values.mean()) if values.numel() else float("nan")
