"""FedLit's latent link types (Xie, Xiong, Yang, "Federated node classification over graphs with
latent link-type heterogeneity", WWW 2023): edges clustered by EM around K edge prototypes.

An edge's embedding is the concatenation [h_a, h_b] of its two endpoints' projected features,
a = min(u, v) first, so (u, v) and (v, u) share it and both directions get one type (the
authors' ``Oxfordblue7/FedLIT:src/models/client.py``). The E-step gives each edge the type of
its most cosine-similar prototype; the M-step moves each prototype to the mean embedding of its
edges. Cosine similarities are taken through per-node products (h · p_a and h · p_b), so the
E×2d edge embeddings are never built.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def canonical_ends(edge_index: Tensor) -> tuple[Tensor, Tensor]:
    """Each edge's lower and higher endpoint (the order its embedding concatenates them in)."""
    return torch.minimum(edge_index[0], edge_index[1]), torch.maximum(edge_index[0], edge_index[1])


def edge_embeddings(h: Tensor, edge_index: Tensor) -> Tensor:
    """[h_a, h_b] per edge (E × 2d)."""
    low, high = canonical_ends(edge_index)
    return torch.cat([h[low], h[high]], dim=1)


def prototype_similarity(h: Tensor, edge_index: Tensor, prototypes: Tensor) -> Tensor:
    """Cosine similarity of every edge's embedding to every prototype (E × K)."""
    d = h.shape[1]
    unit = F.normalize(prototypes, dim=1)
    low, high = canonical_ends(edge_index)
    dots = (h @ unit[:, :d].T)[low] + (h @ unit[:, d:].T)[high]
    squared = (h * h).sum(1)
    norms = (squared[low] + squared[high]).sqrt().clamp_min(1e-12)
    return dots / norms.unsqueeze(1)


def assign_link_types(h: Tensor, edge_index: Tensor, prototypes: Tensor) -> Tensor:
    """E-step: each edge's link type, the index of its most cosine-similar prototype (one type
    per edge; ties go to the lowest index)."""
    return prototype_similarity(h, edge_index, prototypes).argmax(dim=1)


def prototype_means(h: Tensor, edge_index: Tensor, types: Tensor, previous: Tensor) -> Tensor:
    """M-step: each prototype becomes the mean embedding of the edges of its type. A type with
    no edge keeps its previous prototype (our choice: the authors' code takes the mean of an
    empty set, NaN)."""
    k = previous.shape[0]
    sums = torch.zeros_like(previous).index_add_(0, types, edge_embeddings(h, edge_index))
    counts = torch.bincount(types, minlength=k)
    means = sums / counts.clamp_min(1).unsqueeze(1).to(sums.dtype)
    return torch.where((counts > 0).unsqueeze(1), means, previous)


def kmeans_plus_plus(h: Tensor, edge_index: Tensor, k: int, generator: torch.Generator
                     ) -> Tensor:
    """K initial prototypes by k-means++ seeding (Arthur and Vassilvitskii, SODA 2007) of the
    edge embeddings: the first uniformly, each next one with probability proportional to its
    squared distance to the nearest chosen one. The authors' code seeds them by one iteration of
    scikit-learn's ``MiniBatchKMeans`` (k-means++ init); without edges, K zero prototypes."""
    embeddings = edge_embeddings(h, edge_index)
    if len(embeddings) == 0:
        return h.new_zeros(k, 2 * h.shape[1])
    chosen = [int(torch.randint(len(embeddings), (), generator=generator))]
    nearest = torch.full((len(embeddings),), float("inf"), device=h.device, dtype=h.dtype)
    for _ in range(k - 1):
        nearest = torch.minimum(nearest, ((embeddings - embeddings[chosen[-1]]) ** 2).sum(1))
        weights = nearest.double().cpu()
        if weights.sum() <= 0:  # every edge sits on a chosen prototype
            weights = torch.ones_like(weights)
        chosen.append(int(torch.multinomial(weights, 1, generator=generator)))
    return embeddings[chosen].clone()
