"""Graph-level data simulation helpers: structure perturbation of a client's graphs."""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.utils import to_undirected


def flip_edges(edge_index: torch.Tensor, num_nodes: int, ratio: float,
               rng: np.random.Generator) -> torch.Tensor:
    """Delete ``floor(ratio * |E|)`` random undirected edges and add as many random node pairs
    that were not edges before (no self-loops), keeping the graph symmetric (FGFL's quality
    tiers). Fewer are added only when the graph has too few non-edges."""
    src, dst = edge_index
    upper = edge_index[:, src < dst]
    num_edges = upper.size(1)
    num_flip = int(np.floor(ratio * num_edges))
    if num_flip == 0 or num_nodes < 2:
        return edge_index
    keep = rng.permutation(num_edges)[num_flip:]
    kept = upper[:, torch.as_tensor(np.sort(keep), dtype=torch.long)]
    existing = set(map(tuple, upper.t().tolist()))
    possible = num_nodes * (num_nodes - 1) // 2
    target = min(num_flip, possible - num_edges)
    added: list[tuple[int, int]] = []
    while len(added) < target:
        u, v = (int(a) for a in rng.integers(0, num_nodes, 2))
        pair = (min(u, v), max(u, v))
        if u != v and pair not in existing:
            existing.add(pair)
            added.append(pair)
    new = torch.tensor(added, dtype=torch.long).t().reshape(2, -1)
    return to_undirected(torch.cat([kept, new], dim=1), num_nodes=num_nodes)
