"""GPFL's client network before and after learning, as pure functions on tensors: client
features (Eq. 8), similarity of functional embeddings (A_E), the property-guided initial network
and its selector (Eqs. 10-12), the round update (Eq. 9), normalisation and the discrete network
(Eq. 6). Rows and columns are clients."""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from graphfed.mechanisms.client_network import cosine_similarities

MIN_PROPERTIES = 2  # the selector's smallest property set (gpfl/initial_graph.py:feature_removal)
COMPRESSED_DIM = 100  # the code's compress_dim


def centred(rows: Tensor) -> Tensor:
    """Each row minus the mean row: a client's deviation from the uniform mean (Eq. 8's
    marginal, ``gpfl/utils.py:marginal``)."""
    return rows - rows.mean(0, keepdim=True)


def client_features(params: Tensor, marginal: bool, compress: bool) -> Tensor:
    """X_C (Eq. 8) from the trained parameter vectors ``params`` (clients x P): average-pooled
    to about 100 values with window = stride = floor(P/100) (the tail that fills no window is
    dropped, as ``torch.avg_pool1d``), centred over clients when ``marginal``, each row scaled
    to unit norm (``gpfl/client_feature.py:prepare_features``)."""
    if compress:
        window = max(1, params.shape[1] // COMPRESSED_DIM)
        params = F.avg_pool1d(params.unsqueeze(1), window, window).squeeze(1)
    return F.normalize(centred(params) if marginal else params, dim=1)


def embedding_similarity(embeddings: Tensor) -> Tensor:
    """A_E: cosine similarities of the centred functional embeddings, negatives kept (the code
    zeroes them only after mixing, ``gpfl/train.py:round_update``)."""
    return cosine_similarities(centred(embeddings))


def property_similarity(properties: Tensor, standardize: bool = False) -> Tensor:
    """f2sim: cosine similarities of the centred client property vectors, negatives set to 0
    (``gpfl/initial_graph.py:f2sim``); ``standardize`` first divides each property by its
    standard deviation over clients (a constant property becomes 0)."""
    rows = centred(properties)
    if standardize:
        std = properties.std(0, keepdim=True)
        rows = torch.where(std > 0, rows / std.clamp_min(torch.finfo(rows.dtype).tiny), 0.0)
    return cosine_similarities(rows).clamp_min(0.0)


def select_properties(properties: Tensor, target: Tensor, standardize: bool = False
                      ) -> list[int]:
    """The rule-based selector (Eqs. 11-12): from all properties, repeatedly drop the one whose
    removal brings f2sim closest to ``target`` in squared Frobenius distance, while that beats
    the current distance and more than two remain. Returns the kept columns, in order."""
    keep = list(range(properties.shape[1]))

    def distance(columns: list[int]) -> float:
        return float((property_similarity(properties[:, columns], standardize) - target)
                     .pow(2).sum())

    while len(keep) > MIN_PROPERTIES:
        candidates = [distance([c for c in keep if c != drop]) for drop in keep]
        best = min(range(len(keep)), key=candidates.__getitem__)
        if candidates[best] >= distance(keep):
            break
        del keep[best]
    return keep


def normalize_network(adjacency: Tensor, mode: Literal["row", "sym"]) -> Tensor:
    """Row normalisation D^-1 A (a row of zeros stays zero) or D^-1/2 A D^-1/2, D the row
    sums."""
    degree = adjacency.sum(1)
    if mode == "row":
        return adjacency / torch.where(degree > 0, degree, 1.0)[:, None]
    scale = torch.where(degree > 0, degree, 1.0).rsqrt()
    return scale[:, None] * adjacency * scale[None, :]


def discretize(logits: Tensor, mode: Literal["thresh", "ratio", "none"], threshold: float,
               keep_ratio: float) -> Tensor:
    """N̂ from the GAE's scores Z Zᵀ (Eq. 6): the row-softmax S; ``thresh`` keeps the entries
    S_ij >= threshold / k, ``ratio`` the max(1, floor(keep_ratio k)) largest of each row; the
    kept entries are set to 1 and each row normalised (``clientgraph/graph_cons.py:
    postprocess``). ``none`` returns S."""
    scores = torch.softmax(logits, dim=1)
    k = scores.shape[0]
    if mode == "none":
        return scores
    if mode == "thresh":
        kept = (scores >= threshold / k).to(scores.dtype)
    else:
        top = scores.topk(max(1, int(keep_ratio * k)), dim=1).indices
        kept = torch.zeros_like(scores).scatter_(1, top, 1.0)
    return normalize_network(kept, "row")


def updated_network(previous: Tensor, similarity: Tensor, beta: float) -> Tensor:
    """Eq. 9, A_t = beta A_(t-1) + (1 - beta) A_E, with negative entries set to 0."""
    return (beta * previous + (1 - beta) * similarity).clamp_min(0.0)


def inter_client_edges(network: Tensor) -> float:
    """M of the paper's §3.4: half the off-diagonal non-zeros of the aggregation matrix, so
    that 2M + k counts the terms of the aggregation (a one-way link counts a half)."""
    off = network.ne(0) & ~torch.eye(network.shape[0], dtype=torch.bool)
    return int(off.sum()) / 2
