"""The graph auto-encoder's reconstruction loss (``edges.loss: full``): every node pair of a
client's training graph scored against its adjacency, as Kipf & Welling train GAE ("Variational
Graph Auto-Encoders", NeurIPS Bayesian Deep Learning workshop 2016).

Their decoder (Eq. 2, and Eq. 4 for the non-probabilistic GAE) gives p(A_ij = 1 | z_i, z_j) =
σ(z_iᵀ z_j) for every ordered pair (i, j), the target A with its diagonal set to 1 (the paper's
adjacency, "every node connected to itself"). The reconstruction term of Eq. 3 is the
cross-entropy of all N² pairs, and for a sparse A the paper re-weights the terms with A_ij = 1.
The weights are those of the authors' code, with P the training adjacency's entries off the
diagonal (twice its undirected edges):

    pos_weight = (N² − P) / P,    norm = N² / (2 (N² − P)),
    L = norm / N² · Σ_ij [pos_weight · A_ij · (−log σ(s_ij))
                          + (1 − A_ij) · (−log(1 − σ(s_ij)))],   s_ij = z_iᵀ z_j.

The P edge entries weigh ½ of it together, the non-edges just under ½, and the N diagonal
entries N / (2P) on top (the authors' pos_weight counts the edges only).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def reconstruction_loss(logits: Tensor, adjacency: Tensor) -> Tensor:
    """GAE's re-weighted cross-entropy (the module's L) of the [N, N] pair ``logits`` against
    the boolean [N, N] ``adjacency`` (symmetric, diagonal set), which must hold an edge off its
    diagonal."""
    pairs = adjacency.numel()
    edges = int(adjacency.sum()) - int(adjacency.diagonal().sum())
    pos_weight = torch.tensor((pairs - edges) / edges, dtype=logits.dtype, device=logits.device)
    norm = pairs / (2 * (pairs - edges))
    return norm * F.binary_cross_entropy_with_logits(logits, adjacency.to(logits.dtype),
                                                     pos_weight=pos_weight)
