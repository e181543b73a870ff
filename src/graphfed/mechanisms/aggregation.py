"""Aggregation mechanisms shared by algorithms."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from graphfed.tensors import Params


def weighted_average(params: Sequence[Params], weights: Sequence[float]) -> Params:
    """Sum of ``params`` weighted by ``weights`` normalised to 1 (FedAvg's server update)."""
    if not params:
        raise ValueError("weighted_average needs at least one parameter set")
    w = torch.tensor(weights, dtype=torch.float64)
    if (w < 0).any() or w.sum() <= 0:
        raise ValueError(f"weights must be non-negative with a positive sum, got {list(weights)}")
    w = w / w.sum()
    out = {}
    for name in params[0]:
        stacked = torch.stack([p[name] for p in params]).to(torch.float64)
        shape = (-1,) + (1,) * (stacked.dim() - 1)
        out[name] = (stacked * w.to(stacked.device).view(shape)).sum(0).to(params[0][name].dtype)
    return out
