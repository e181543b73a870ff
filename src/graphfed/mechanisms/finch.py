"""FINCH (Sarfraz, Sharma, Stiefelhagen, "Efficient Parameter-free Clustering Using First Neighbor
Relations", CVPR 2019): clustering without a number of clusters, by first neighbours.

Each point is linked to its nearest other point (its first neighbour, Eq. 1 of the paper: i and j
are linked when j is i's first neighbour, i is j's, or both share one); the connected components
are the clusters of the first partition. The same rule is applied again to the clusters' means,
and again, giving ever coarser partitions, until one cluster remains or nothing merges. Federated
prototype methods (FPL, FGGP) cluster each class's client prototypes this way and keep the last
partition that still has more than one cluster (or the first partition, whatever its size), so a
class seen in several domains keeps one prototype per domain.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from torch import Tensor


def first_neighbour_partition(points: Tensor) -> Tensor:
    """The clusters of one FINCH step (``points`` as rows; cosine distance, the authors' choice
    for prototypes): the connected components of the graph linking each point to its nearest
    other point, numbered in the order of their first member. Computed in float64 on the CPU,
    so a tie breaks the same way on every thread count (towards the lower index)."""
    n = points.shape[0]
    if n < 2:
        return torch.zeros(n, dtype=torch.long)
    unit = points.double().cpu()
    unit = unit / unit.norm(dim=1, keepdim=True).clamp_min(1e-12)
    distance = 1.0 - unit @ unit.t()
    distance.fill_diagonal_(float("inf"))
    nearest = distance.argmin(dim=1).numpy()
    links = coo_matrix((np.ones(n), (np.arange(n), nearest)), shape=(n, n))
    _, labels = connected_components(links, directed=True, connection="weak")
    return torch.as_tensor(labels, dtype=torch.long)


def cluster_means(points: Tensor, labels: Tensor) -> Tensor:
    """Each cluster's mean point (clusters numbered 0..k-1), summed in float64 in row order."""
    k = int(labels.max()) + 1
    total = torch.zeros(k, points.shape[1], dtype=torch.float64)
    total.index_add_(0, labels, points.double().cpu())
    counts = torch.bincount(labels, minlength=k).double()
    return total / counts.view(-1, 1)


def finch(points: Tensor) -> Tensor:
    """Each point's cluster in FINCH's last partition with more than one cluster (the first
    partition when even that one has a single cluster), numbered 0..k-1 in the order of the
    clusters' first members: the partition the FPL and FGGP codes keep
    (``FINCH(...)[0][:, -1]`` with ``ensure_early_exit=False``)."""
    labels = first_neighbour_partition(points)
    while labels.numel() and int(labels.max()) > 0:
        merged = first_neighbour_partition(cluster_means(points, labels))[labels]
        if int(merged.max()) == 0 or int(merged.max()) >= int(labels.max()):
            break  # one cluster left, or nothing merged: keep the partition before
        labels = merged
    return labels
