"""Undirected adjacency of a large edge list, built by SciPy with 32-bit indices.

Symmetrising and deduplicating an edge list as tensors (PyG's ``to_undirected``, which sorts a
doubled copy) holds several int64 copies of it at once: at ten million nodes that was most of
the memory of generating the CSBM graph and of handing it to METIS. A SciPy CSR matrix gives
the same sorted, duplicate-free result in a few bytes per edge.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse
import torch


def undirected_csr(edge_index: torch.Tensor, num_nodes: int) -> scipy.sparse.csr_array:
    """Every edge of ``edge_index`` in both directions, once, without self-loops; each row's
    neighbours in ascending order."""
    row, col = edge_index.numpy()
    keep = row != col
    index = np.int32 if num_nodes < 2**31 else np.int64
    adjacency = scipy.sparse.csr_array(
        (np.ones(int(keep.sum()), dtype=bool), (row[keep].astype(index), col[keep].astype(index))),
        shape=(num_nodes, num_nodes))
    adjacency = (adjacency + adjacency.T).tocsr()
    adjacency.sort_indices()
    return adjacency


def csr_edge_index(adjacency: scipy.sparse.csr_array) -> torch.Tensor:
    """``adjacency`` as a PyG edge index, sorted by (source, target) as ``coalesce`` sorts."""
    counts = np.diff(adjacency.indptr)
    source = np.repeat(np.arange(adjacency.shape[0], dtype=np.int64), counts)
    return torch.stack([torch.from_numpy(source),
                        torch.from_numpy(adjacency.indices.astype(np.int64))])
