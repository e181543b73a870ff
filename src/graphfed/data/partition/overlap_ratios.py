"""The true overlap between clients' subgraphs, which only the operator who made the partition
knows (FairGFL, Zhou et al. 2025, Eqs. 7-10; spec ``fairgfl.md`` §3.1): the reference its
private estimates are scored against (Table III) and what an oracle ablation aggregates with.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


def _ratios(items_of: Sequence[Tensor], num_items: int) -> Tensor:
    """r_ij = |A_i ∩ A_j| / |A_i| for the item sets ``items_of`` (distinct ids below
    ``num_items``); the diagonal, and the row of a client without items, are 0."""
    held = torch.zeros(len(items_of), num_items, dtype=torch.bool)
    for i, items in enumerate(items_of):
        held[i, items] = True
    shared = torch.stack([held[:, items].sum(1) for items in items_of]).double()
    sizes = torch.tensor([len(items) for items in items_of], dtype=torch.float64)
    ratios = shared / sizes.clamp_min(1)[:, None]
    ratios.fill_diagonal_(0)
    return ratios


def true_overlap(edge_index: Tensor, num_nodes: int,
                 client_ids: Sequence[Tensor]) -> dict[str, Tensor]:
    """N×N float64 ratios of client i to client j: ``node`` r_ij = |V_i ∩ V_j| / |V_i| (Eq. 7)
    and ``link`` l_ij = |E_i ∩ E_j| / |E_i| (Eq. 10, RECONSTRUCTED like r_ij), E_i the
    undirected edges of i's induced subgraph (self-loops join no two nodes and are not
    counted); 0 on the diagonal and where |V_i| or |E_i| is 0."""
    u, v = edge_index.min(0).values, edge_index.max(0).values
    keys = torch.unique((u * num_nodes + v)[u != v])
    u, v = keys // num_nodes, keys % num_nodes
    inside = torch.zeros(num_nodes, dtype=torch.bool)
    links = []
    for ids in client_ids:
        inside[ids] = True
        links.append(torch.nonzero(inside[u] & inside[v]).view(-1))
        inside[ids] = False
    return {"node": _ratios(client_ids, num_nodes), "link": _ratios(links, len(keys))}


def mean_overlap(ratios: Tensor) -> Tensor:
    """Each client's average overlap with the others, r_i = Σ_{j≠i} r_ij / (N−1) (Eq. 8);
    0 for a lone client."""
    n = ratios.size(0)
    return ratios.sum(1) / max(n - 1, 1)
