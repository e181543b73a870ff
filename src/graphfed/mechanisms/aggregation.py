"""Aggregation mechanisms shared by algorithms."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from graphfed.tensors import Params


def weight_shares(weights: Sequence[float]) -> list[float]:
    """``weights`` divided by their sum (``ValueError`` for negative ones or a zero sum), in
    Python floats: a handful of numbers costs no tensor operations."""
    w = [float(x) for x in weights]
    total = math.fsum(w)
    if any(x < 0 for x in w) or not total > 0:
        raise ValueError(f"weights must be non-negative with a positive sum, got {list(weights)}")
    return [x / total for x in w]


def normalised_weights(weights: Sequence[float]) -> Tensor:
    """``weight_shares`` as a float64 tensor."""
    return torch.tensor(weight_shares(weights), dtype=torch.float64)


def weighted_average(params: Sequence[Params], weights: Sequence[float]) -> Params:
    """Sum of ``params`` weighted by ``weights`` normalised to 1 (FedAvg's server update)."""
    if not params:
        raise ValueError("weighted_average needs at least one parameter set")
    w = weight_shares(weights)
    names = list(params[0])
    # summed in float64, one client after another, in place: no stacked copy of K clients,
    # and one multi-tensor add a client rather than one add a tensor
    totals = [torch.zeros(params[0][n].shape, dtype=torch.float64, device=params[0][n].device)
              for n in names]
    for p, share in zip(params, w, strict=True):
        torch._foreach_add_(totals, [p[n] for n in names], alpha=share)
    return {n: total.to(params[0][n].dtype) for n, total in zip(names, totals, strict=True)}


def global_step(current: Params, average: Params, lr: float) -> Params:
    """x + lr * (average - x): the server learning rate eta_g (SCAFFOLD, Karimireddy et al.
    2020, Alg. 1 line 16, on the mean of the y_i - x); ``average`` itself when lr = 1, with no
    rounding, so a server at rate 1 holds exactly FedAvg's model."""
    if lr == 1.0:
        return average
    return {k: v + lr * (average[k] - v) for k, v in current.items()}
