"""Greedy one-to-one matching of two sets by a distance matrix, shared by FairGFL's overlap
estimation (matching privatised node samples) and FedLit's server (matching clients' link-type
prototypes to the global ones)."""

from __future__ import annotations

import math

import torch
from torch import Tensor


def greedy_pairs(distance: Tensor, tau: float = math.inf) -> Tensor:
    """A one-to-one matching of the rows of ``distance`` to its columns, greedy by smallest
    distance under ``tau`` (ties by row, then column): ``partner[u]`` is u's column, or -1.
    Vectorised: every pair that is the smallest of both its row and its column is one the
    sequential greedy also takes, so each pass takes all of them at once."""
    distance = distance.masked_fill(distance >= tau, math.inf)
    partner = torch.full((distance.shape[0],), -1, dtype=torch.long)
    rows = torch.arange(distance.shape[0])
    while distance.numel() and torch.isfinite(distance).any():
        best, column = distance.min(dim=1)
        mutual = torch.isfinite(best) & (distance.argmin(dim=0)[column] == rows)
        partner[rows[mutual]] = column[mutual]
        distance[rows[mutual]] = math.inf
        distance[:, column[mutual]] = math.inf
    return partner
