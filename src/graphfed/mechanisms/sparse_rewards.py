"""Sparsified gradient rewards (CGSV, Xu et al. NeurIPS 2021), the mechanism FGFL, CGSV, DW, EU
and RFFL share: aggregate the agents' updates by value, then give each agent only the
top-magnitude components of the aggregate, more components for a higher value."""

from __future__ import annotations

import logging
import math
from typing import Literal

import numpy as np
import torch
from torch import Tensor

log = logging.getLogger("graphfed.mechanisms")

MaskMode = Literal["all", "layer"]
RewardShape = Literal["tanh", "linear"]


def value_weights(values: Tensor) -> Tensor:
    """Aggregation weights ReLU(r) / sum ReLU(r) (Eq. 13); agents with r <= 0 get 0.

    When no value is positive the weights fall back to uniform, with a warning."""
    positive = values.clamp_min(0).double()
    if positive.sum() <= 0:
        log.warning("every agent value is <= 0; aggregating with uniform weights")
        return torch.full_like(positive, 1.0 / len(values))
    return positive / positive.sum()


def weighted_sum(updates: Tensor, weights: Tensor) -> Tensor:
    """sum_i w_i u_i for stacked updates [n, D]."""
    return (weights.to(updates.dtype).view(-1, 1) * updates).sum(0)


def reward_counts(values: Tensor, dim: int, beta: float = 1.0,
                  shape: RewardShape = "tanh") -> Tensor:
    """Components of the aggregate each agent receives (Eq. 4):
    floor(D * tanh(beta r_i) / max_j tanh(beta r_j)), clipped to [0, D]; ``linear`` uses
    r_i / max_j r_j (RFFL). An agent with r_i <= 0 gets nothing; the top agent gets all D."""
    v = values.double()
    scores = torch.tanh(beta * v) if shape == "tanh" else v
    top = scores.max()
    if top <= 0:
        return torch.zeros(len(values), dtype=torch.long)
    counts = torch.floor(dim * scores / top).clamp(0, dim).long()
    counts[v <= 0] = 0
    counts[scores == top] = dim
    return counts


def sparsify(vector: Tensor, count: int, mode: MaskMode = "all",
             sizes: list[int] | None = None) -> tuple[Tensor, Tensor]:
    """Indices (int32) and values of the components of ``vector`` an agent with ``count``
    receives: the ``count`` largest in absolute value (``all``, exactly ``count`` even on ties),
    or in ``layer`` mode the top ceil(q * size) of each tensor, q = count / D."""
    dim = vector.numel()
    if count <= 0:
        index = torch.empty(0, dtype=torch.long, device=vector.device)
    elif count >= dim:
        index = torch.arange(dim, device=vector.device)
    elif mode == "all":
        index = top_magnitude(vector, count)
    else:
        if sizes is None or sum(sizes) != dim:
            raise ValueError("layer mode needs the tensor sizes of the flattened vector")
        ratio, parts, start = count / dim, [], 0
        for size in sizes:
            keep = min(size, math.ceil(ratio * size))
            parts.append(top_magnitude(vector[start:start + size], keep) + start)
            start += size
        index = torch.cat(parts)
    return index.to(torch.int32), vector[index].to(torch.float32)


def top_magnitude(vector: Tensor, count: int) -> Tensor:
    """Ascending indices of the ``count`` (0 < count <= D) largest components of ``vector`` in
    absolute value, ties at the threshold taken from the lowest index. A selection
    (``kthvalue``, linear in D) and a mask, where ``topk`` then ``sort`` order what they keep:
    rewards keep a large share of D."""
    magnitude = vector.abs()
    threshold = magnitude.kthvalue(magnitude.numel() - count + 1).values
    keep = magnitude > threshold
    missing = count - int(keep.sum())
    if missing:
        keep[(magnitude == threshold).nonzero().squeeze(1)[:missing]] = True
    return keep.nonzero().squeeze(1)


def densify(index: Tensor, value: Tensor, dim: int) -> Tensor:
    out = torch.zeros(dim, dtype=value.dtype, device=value.device)
    out[index.long()] = value
    return out


def encode_sparse(index: Tensor, value: Tensor, dim: int) -> dict[str, Tensor]:
    """The cheaper wire form of a sparse vector: int32 indices + values (8 B per component), or
    a D-bit mask + values (D/8 + 4 B per component) once more than ~D/32 components are kept."""
    if 8 * len(index) <= (dim + 7) // 8 + 4 * len(index):
        return {"reward_index": index.to(torch.int32), "reward_value": value}
    mask = np.zeros(dim, dtype=bool)
    mask[index.cpu().numpy()] = True
    return {"reward_mask": torch.from_numpy(np.packbits(mask)), "reward_value": value}


def decode_sparse(tensors: dict[str, Tensor], dim: int) -> Tensor | None:
    """The dense vector of ``encode_sparse``'s output (None when the message carries none)."""
    value = tensors.get("reward_value")
    if value is None or value.numel() == 0:
        return None
    if "reward_mask" in tensors:
        bits = np.unpackbits(tensors["reward_mask"].cpu().numpy(), count=dim).astype(bool)
        index = torch.from_numpy(np.flatnonzero(bits))
    else:
        index = tensors["reward_index"]
    return densify(index.to(value.device), value, dim)
