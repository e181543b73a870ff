"""A network over clients: each client receives a mix of every client's model (or update) by a
weight matrix W, where row i says how much client i takes from each client j.

Graph-based personalised FL builds W from how alike the clients' models are: FedAMP (Huang et
al., AAAI 2021) from an attention function of their distances or cosines, pFedGraph (Ye et al.,
ICML 2023) by projecting onto the probability simplex, GPFL from a learned client network. The
pieces here are the ones they share: models as rows of one float64 matrix, their Gram matrix
(cosines, squared distances), softmax weights of scaled cosines, the mix Σ_j W_ij θ_j over
parameter dicts, and the simplex projection.

Every product is one matrix product (``V @ V.T``, ``W @ V``). MKL's strict reproducibility mode,
which importing graphfed turns on, gives the same bits for it whatever the thread count. A long
``sum`` over a flat vector would not: PyTorch splits it across threads above 32,768 elements.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from graphfed.tensors import Params

NORM_EPS = 1e-8  # the smallest norm a cosine divides by, as torch's cosine_similarity


def stack(params: Sequence[Params], names: Sequence[str] | None = None) -> Tensor:
    """``[K, P]`` float64: row k is parameter set k flattened over ``names`` (default: every
    name of the first set, in its order)."""
    names = list(params[0]) if names is None else list(names)
    return torch.stack([torch.cat([p[k].reshape(-1).to(torch.float64) for k in names])
                        for p in params])


def gram(vectors: Tensor) -> Tensor:
    """``V Vᵀ``: every pairwise inner product of the rows of ``vectors``."""
    return vectors @ vectors.t()


def row_norms(vectors: Tensor) -> Tensor:
    """The Euclidean norm of each row (from the Gram diagonal, thread-count independent)."""
    return gram(vectors).diagonal().clamp_min(0.0).sqrt()


def cosine_similarities(vectors: Tensor, eps: float = NORM_EPS) -> Tensor:
    """``[K, K]`` cosine similarity of every pair of rows; a norm below ``eps`` counts as
    ``eps`` (a row of zeros has cosine 0 with everything)."""
    g = gram(vectors)
    norms = g.diagonal().clamp_min(0.0).sqrt().clamp_min(eps)
    return g / (norms[:, None] * norms[None, :])


def exp_similarity_weights(cosines: Tensor, scale: float, include_self: bool = True) -> Tensor:
    """Row i: exp(scale·cos_ij) / Σ_k exp(scale·cos_ik), a softmax (the codes' exp/sum without
    its overflow), over every j or, without ``include_self``, over j ≠ i (row i then needs
    another client). FED-PUB weighs its personalised aggregation so (``server.py``, τ =
    ``norm_scale``), and GPFL's copy of FedAMP its cloud models over the other clients."""
    logits = scale * cosines.to(torch.float64)
    if not include_self:
        logits.fill_diagonal_(float("-inf"))
    return logits.softmax(dim=1)


def squared_distances(vectors: Tensor) -> Tensor:
    """``[K, K]`` squared Euclidean distance of every pair of rows, ‖v_i‖² + ‖v_j‖² − 2⟨v_i, v_j⟩
    (clamped at 0 against rounding; exactly 0 on the diagonal)."""
    g = gram(vectors)
    sq = g.diagonal()
    out = (sq[:, None] + sq[None, :] - 2 * g).clamp_min(0.0)
    return out.fill_diagonal_(0.0)


def mix(params: Sequence[Params], weights: Tensor) -> list[Params]:
    """Row i of ``weights`` (``[R, K]``) applied to the K parameter sets: out_i = Σ_j W_ij θ_j,
    per parameter name, accumulated in float64 and returned in each parameter's dtype.

    Any real weights: a row-stochastic W gives convex combinations (FedAMP, pFedGraph); GPFL
    mixes updates with its normalised network."""
    if weights.dim() != 2 or weights.shape[1] != len(params):
        raise ValueError(f"weights of shape {tuple(weights.shape)} cannot mix "
                         f"{len(params)} parameter sets")
    w = weights.to(torch.float64)
    out: list[Params] = [{} for _ in range(w.shape[0])]
    for name, first in params[0].items():
        stacked = torch.stack([p[name].reshape(-1) for p in params]).to(torch.float64)
        mixed = (w.to(stacked.device) @ stacked).to(first.dtype)
        for row, target in zip(mixed, out, strict=True):
            target[name] = row.view_as(first)
    return out


def project_to_simplex(v: Tensor) -> Tensor:
    """Euclidean projection of each row of ``v`` onto the probability simplex
    {x : x ≥ 0, Σ x = 1}, by sorting (Duchi et al., ICML 2008, Fig. 1; Wang & Carreira-Perpiñán,
    arXiv:1309.1541, Alg. 1): with u the row sorted in decreasing order, ρ the largest j with
    u_j − (Σ_{r≤j} u_r − 1)/j > 0 and τ = (Σ_{r≤ρ} u_r − 1)/ρ, the projection is max(v − τ, 0)."""
    rows = v.reshape(-1, v.shape[-1]).to(torch.float64)
    u = rows.sort(dim=1, descending=True).values
    excess = u.cumsum(dim=1) - 1.0
    j = torch.arange(1, rows.shape[1] + 1, dtype=torch.float64, device=rows.device)
    rho = ((u - excess / j) > 0).to(torch.int64).cumsum(dim=1).argmax(dim=1, keepdim=True)
    tau = excess.gather(1, rho) / (rho + 1).to(torch.float64)
    return (rows - tau).clamp_min(0.0).reshape(v.shape)
