"""Prototypes: mean embeddings of groups of samples, and what prototype-based methods do with them.

A group is a column of a membership matrix: a motif's graphs (FGFL Eq. 11) or a class's samples
(FedProto Eq. 4, FedTGP Eq. 2). Prototype methods exchange these means instead of models, so
clients whose networks differ in size federate as long as their embeddings share one width.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

Distance = Literal["mse", "l2"]


def member_means(embedding: Tensor, membership: Tensor) -> tuple[Tensor, Tensor]:
    """Mean embedding over the samples of each group (a column of ``membership``), and which
    groups have any sample at all."""
    m = membership.to(embedding.dtype)
    counts = m.sum(0)
    return (m.t() @ embedding) / counts.clamp_min(1).view(-1, 1), counts > 0


def class_prototypes(embedding: Tensor, labels: Tensor, num_classes: int
                     ) -> tuple[Tensor, Tensor]:
    """Each class's mean embedding over ``labels``' samples (zero for an absent class), and
    its sample count (FedProto Eq. 4)."""
    membership = F.one_hot(labels, num_classes)
    means, _ = member_means(embedding, membership)
    return means, membership.sum(0)


def weighted_class_means(prototypes: list[Tensor], counts: list[Tensor], weighted: bool
                         ) -> tuple[Tensor, Tensor]:
    """Per class, the mean of the clients' prototypes of that class over the clients that hold
    it: weighted by their sample counts of the class (FedProto Eq. 6; the mean embedding over
    every client's samples of the class), or uniformly; and which classes any client holds.
    Summed in float64 in client order, so the result does not depend on the thread count."""
    total = torch.zeros(prototypes[0].shape, dtype=torch.float64)
    weight = torch.zeros(prototypes[0].shape[0], dtype=torch.float64)
    for proto, count in zip(prototypes, counts, strict=True):
        held = (count > 0).double()
        w = count.double() if weighted else held
        total += w.view(-1, 1) * proto.double()
        weight += w
    held = weight > 0
    return (total / weight.clamp_min(1e-300).view(-1, 1)).float(), held


def prototype_distance(embedding: Tensor, target: Tensor, distance: Distance) -> Tensor:
    """Mean over rows of the distance from each embedding to its target: ``mse`` the mean
    squared difference over the dimensions (``nn.MSELoss``, the authors' code), ``l2`` the
    Euclidean distance (the papers' phi)."""
    diff = embedding - target
    if distance == "mse":
        return diff.pow(2).mean()
    return diff.pow(2).sum(1).clamp_min(1e-12).sqrt().mean()


def nearest_prototype_scores(embedding: Tensor, prototypes: Tensor, known: Tensor) -> Tensor:
    """Class scores that rank classes by nearness: minus the squared distance from each
    embedding to each known prototype; a class without a prototype scores below every known
    one, so the argmax is the nearest known prototype (the authors' inference rule)."""
    squared = (embedding.unsqueeze(1) - prototypes.unsqueeze(0)).pow(2).sum(-1)
    scores = -squared
    floor = scores.min(dim=1, keepdim=True).values - 1.0
    return torch.where(known.view(1, -1), scores, floor)
