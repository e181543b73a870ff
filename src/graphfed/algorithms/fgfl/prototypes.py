"""Motif prototypes (FGFL Eq. 11): the mean graph embedding over the graphs holding a motif."""

from __future__ import annotations

from torch import Tensor


def motif_means(embedding: Tensor, membership: Tensor) -> tuple[Tensor, Tensor]:
    """Mean embedding over the graphs containing each motif, and which motifs occur at all."""
    m = membership.to(embedding.dtype)
    counts = m.sum(0)
    return (m.t() @ embedding) / counts.clamp_min(1).view(-1, 1), counts > 0
