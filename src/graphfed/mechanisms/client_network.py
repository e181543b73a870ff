"""Networks over clients: how alike the clients' models are, and a weighted mix of their models
or updates along a weight matrix W (row i: what client i takes from each client j).

Graph-based personalised FL (GPFL's Eq. 2, FedAMP, pFedGraph) is built from these pieces.
Every product is one matrix product, which MKL's strict reproducibility mode (set when graphfed
is imported) computes to the same bits whatever the thread count.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from graphfed.tensors import Params

NORM_EPS = 1e-8  # smallest norm a cosine divides by: a zero row has cosine 0 with every row


def stack(params: Sequence[Params], names: Sequence[str] | None = None) -> Tensor:
    """``[K, P]`` float64, row k the k-th parameter set flattened over ``names`` (default: the
    first set's names, in its order)."""
    order = list(params[0]) if names is None else list(names)
    return torch.stack([torch.cat([p[k].reshape(-1).double() for k in order]) for p in params])


def gram(vectors: Tensor) -> Tensor:
    """Every pairwise inner product of the rows of ``vectors``."""
    return vectors @ vectors.t()


def cosine_similarities(vectors: Tensor, eps: float = NORM_EPS) -> Tensor:
    """``[K, K]`` cosine similarity of every pair of rows of ``vectors``."""
    inner = gram(vectors)
    norms = inner.diagonal().clamp_min(0.0).sqrt().clamp_min(eps)
    return inner / (norms[:, None] * norms[None, :])


def mix(params: Sequence[Params], weights: Tensor) -> list[Params]:
    """``out_i = Σ_j weights[i, j] · params[j]`` for every row i of ``weights`` (``[R, K]``),
    name by name, summed in float64 and returned in each parameter's own dtype."""
    if weights.dim() != 2 or weights.shape[1] != len(params):
        raise ValueError(f"weights of shape {tuple(weights.shape)} cannot mix "
                         f"{len(params)} parameter sets")
    w = weights.double()
    out: list[Params] = [{} for _ in range(w.shape[0])]
    for name, first in params[0].items():
        rows = torch.stack([p[name].reshape(-1) for p in params]).double()
        for target, row in zip(out, (w.to(rows.device) @ rows).to(first.dtype), strict=True):
            target[name] = row.view_as(first)
    return out
