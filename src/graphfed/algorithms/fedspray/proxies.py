"""Class-wise structure proxies (spec §3.2-§3.4): an unlabelled node's proxy from the class
proxies, a client's local class proxies, and the server's per-class alignment (Eqs. 10, 14-15).

A structure proxy s_j ∈ R^{d_s} stands in for class j's neighbourhood information, so a minority
node is classified with its class's (unbiased) structure, not its heterophilous neighbours'."""

from __future__ import annotations

import torch
from torch import Tensor


def soft_proxies(q: Tensor, class_proxies: Tensor) -> Tensor:
    """s_i = ⟨q_i, S⟩ = Σ_j q_ij s_j (Eq. 10): the proxy of a node whose class is unknown."""
    return q @ class_proxies


def class_means(node_proxies: Tensor, labels: Tensor, num_classes: int) -> Tensor:
    """Row j: the mean proxy of the labelled class-j nodes, zeros where there is none (Alg. 1
    line 23; the server gives such a row zero weight)."""
    sums = torch.zeros(num_classes, node_proxies.shape[1], dtype=node_proxies.dtype,
                       device=node_proxies.device).index_add_(0, labels, node_proxies)
    counts = torch.bincount(labels, minlength=num_classes).clamp(min=1)
    return sums / counts.view(-1, 1).to(sums.dtype)


def class_ratios(labels: Tensor, num_classes: int) -> Tensor:
    """a_j: the share of class j among a client's labelled nodes (zeros without labels)."""
    counts = torch.bincount(labels, minlength=num_classes).float()
    return counts / counts.sum().clamp(min=1.0)


def alignment_weights(ratios: Tensor, sizes: Tensor, rule: str) -> Tensor:
    """K x C weights, column j summing to 1 over the clients with labelled class-j nodes (a
    column without any such client is all zero). ``class_ratio``: a_j^(k) / A_j (Eq. 15), so a
    client where j is the majority dominates s_j; ``uniform``: equal; ``size``: by N_k."""
    present = ratios > 0
    if rule == "class_ratio":
        raw = ratios
    elif rule == "uniform":
        raw = present.to(ratios.dtype)
    else:
        raw = present.to(ratios.dtype) * sizes.view(-1, 1).to(ratios.dtype)
    total = raw.sum(0, keepdim=True)
    return torch.where(total > 0, raw / total.clamp(min=torch.finfo(raw.dtype).tiny), 0.0)


def align(current: Tensor, local: list[Tensor], ratios: Tensor, sizes: Tensor, rule: str
          ) -> Tensor:
    """The new global S: each class's weighted mean of the clients' local class proxies (Eq. 15);
    a class no replying client has labelled keeps its current proxy."""
    weights = alignment_weights(ratios, sizes, rule)
    stacked = torch.stack(local).to(torch.float64)
    mixed = (weights.to(torch.float64).unsqueeze(-1) * stacked).sum(0).to(current.dtype)
    seen = weights.sum(0) > 0
    return torch.where(seen.view(-1, 1), mixed, current)
