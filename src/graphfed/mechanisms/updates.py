"""Model updates as flat vectors: which parameters are exchanged, deltas, norms.

Incentive and clustering methods (FGFL, CGSV, RFFL, GCFL) reason about an update as one vector:
its cosine with the aggregate, its norm, its top-magnitude components. These helpers give every
algorithm the same view of "the gradient".
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

from graphfed.tensors import Params

SharedScope = Literal["all", "convs"]
# clustered FL also offers every message-passing layer but the last (a node GNN's classifier)
LayerScope = Literal["all", "convs", "convs_but_last"]
NormalizeMode = Literal["none", "unit", "clip"]


def with_prefix(tensors: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    """Name every tensor ``prefix + name``: several parameter sets travel in one message."""
    return {prefix + k: v for k, v in tensors.items()}


def under_prefix(tensors: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    """The tensors named ``prefix + name``, as ``name`` (the inverse of ``with_prefix``)."""
    return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}


def shared_names(params: Params, scope: LayerScope) -> list[str]:
    """Names of the exchanged parameters: everything, or only the message-passing layers (the
    GCFL code base's convention, which FGFL's code inherits), or all of those but the last."""
    if scope == "all":
        return list(params)
    names = [k for k in params if k.startswith("convs.")]
    if scope == "convs_but_last":
        last = max((int(k.split(".")[1]) for k in names), default=0)
        names = [k for k in names if int(k.split(".")[1]) < last]
    if not names:
        raise ValueError(f"shared scope {scope!r} needs a model with (that many) "
                         "message-passing layers 'convs'")
    return names


def flatten(params: Params, names: list[str]) -> Tensor:
    return torch.cat([params[k].reshape(-1) for k in names])


def unflatten(vector: Tensor, like: Params, names: list[str]) -> Params:
    """Split ``vector`` back into tensors shaped like ``like[names]``."""
    out, start = {}, 0
    for k in names:
        n = like[k].numel()
        out[k] = vector[start:start + n].view_as(like[k])
        start += n
    if start != vector.numel():
        raise ValueError(f"vector has {vector.numel()} entries, the parameters {start}")
    return out


def delta(after: Params, before: Params, names: list[str]) -> Tensor:
    """The local update ``after - before`` over ``names``, flattened."""
    return flatten(after, names) - flatten(before, names)


def add_flat(params: Params, vector: Tensor, names: list[str]) -> Params:
    """``params`` with ``vector`` (flat, over ``names``) added; other parameters unchanged."""
    step = unflatten(vector, params, names)
    return {k: v + step[k] if k in step else v for k, v in params.items()}


def normalize(vector: Tensor, mode: NormalizeMode, bound: float = 1.0) -> Tensor:
    """``unit``: divide by the norm (+1e-7), as the CGSV/RFFL/FGFL code does; ``clip``: scale
    down to norm <= ``bound``; ``none``: unchanged."""
    if mode == "none":
        return vector
    norm = vector.norm()
    if mode == "unit":
        return torch.div(vector, norm + 1e-7)
    return vector * min(1.0, bound / float(norm)) if norm > 0 else vector


def cosine(a: Tensor, b: Tensor, eps: float = 1e-10) -> float:
    return float(torch.dot(a, b) / (a.norm() * b.norm() + eps))


def cosines(updates: Tensor, target: Tensor, eps: float = 1e-10) -> Tensor:
    """cos(u_i, t) of each stacked update ``[n, D]`` with one vector (CGSV's alignment with the
    aggregate), each norm clamped at ``eps`` as ``cosine_similarity`` clamps it. Products
    summed per row, not one matrix-vector product, whose bits changed with the thread count;
    nor ``cosine_similarity`` over the expanded target, which materialises it."""
    norms = updates.norm(dim=1).clamp_min(eps) * target.norm().clamp_min(eps)
    return torch.div((updates * target).sum(1), norms)
