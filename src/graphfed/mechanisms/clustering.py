"""Clustering mechanisms of clustered FL (GCFL, Xie et al. NeurIPS 2021): the DTW distance
between update-norm sequences (GCFL+) and the bipartition of a cluster by a minimum cut of its
members' update-similarity graph (GCFL, Alg. 1)."""

from __future__ import annotations

import networkx as nx
import numpy as np


def dtw_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Dynamic time warping distance: sqrt of the least summed squared difference over
    monotone alignments of the two sequences."""
    n, m = len(a), len(b)
    cost = np.full((n + 1, m + 1), np.inf)
    cost[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost[i, j] = (a[i - 1] - b[j - 1]) ** 2 + min(cost[i - 1, j], cost[i, j - 1],
                                                           cost[i - 1, j - 1])
    return float(np.sqrt(cost[n, m]))


def min_cut(similarity: np.ndarray, members: list[int]) -> tuple[list[int], list[int]]:
    """Stoer-Wagner minimum cut of the complete graph weighted by ``similarity``."""
    g = nx.Graph()
    for i in range(len(members)):
        for j in range(i + 1, len(members)):  # cos + 1 may round below 0 for opposite updates
            g.add_edge(i, j, weight=max(0.0, float(similarity[i, j])))
    _, (left, right) = nx.stoer_wagner(g)
    return sorted(members[i] for i in left), sorted(members[i] for i in right)
