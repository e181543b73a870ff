"""Motifs of labelled graphs (bonds and small rings) and FGFL's TF-IDF motif vocabulary.

Following HM-GNN (Yu & Gao, ICML 2022) as FGFL uses it: a ring is a cycle of the cycle basis with at
most ``max_ring`` nodes; a bond is an edge whose endpoints do not both lie on one kept ring. A motif
is identified by the node labels along it, canonicalised over rotations and reflections, so equal
motifs get equal keys on every agent regardless of the order graphs or nodes are visited.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import networkx as nx
import torch
from torch import Tensor
from torch_geometric.data import Data

Motif = tuple[int, ...]  # (kind, label, label, ...): kind 0 = bond, 1 = ring
BOND, RING = 0, 1
KEY_WIDTH = 6  # kind, length, up to 4 labels


def ring_key(labels: list[int]) -> Motif:
    """Smallest label sequence over all rotations and reflections of the cycle."""
    n = len(labels)
    candidates = []
    for seq in (labels, labels[::-1]):
        candidates.extend(tuple(seq[i:] + seq[:i]) for i in range(n))
    return (RING, *min(candidates))


def bond_key(a: int, b: int) -> Motif:
    return (BOND, min(a, b), max(a, b))


def node_labels(x: Tensor) -> list[int]:
    """A node's label is the argmax of its one-hot features (TU node label, or degree)."""
    return x.argmax(1).tolist() if x.numel() else []


def graph_motifs(graph: Data, max_ring: int = 4) -> Counter[Motif]:
    """Occurrences of each motif (bond or ring) in ``graph``; edge labels are ignored."""
    labels = node_labels(graph.x)
    g = nx.Graph()
    g.add_nodes_from(range(graph.num_nodes))
    g.add_edges_from((u, v) for u, v in graph.edge_index.t().tolist() if u != v)
    counts: Counter[Motif] = Counter()
    ring_edges = set()
    for cycle in nx.cycle_basis(g):
        if len(cycle) > max_ring:
            continue
        counts[ring_key([labels[v] for v in cycle])] += 1
        ring_edges.update(frozenset((cycle[i], cycle[(i + 1) % len(cycle)]))
                          for i in range(len(cycle)))
    for u, v in g.edges():
        if frozenset((u, v)) not in ring_edges:
            counts[bond_key(labels[u], labels[v])] += 1
    return counts


@dataclass
class MotifVocabulary:
    """An agent's kept motifs and which of its graphs contain each."""

    keys: list[Motif]
    membership: Tensor  # bool [num_graphs, len(keys)]

    @property
    def counts(self) -> Tensor:
        """|D_{i,k}|: the number of graphs containing each kept motif."""
        return self.membership.sum(0)

    def encoded(self) -> Tensor:
        """Keys as an int64 [k, KEY_WIDTH] tensor (kind, length, labels, -1 padding)."""
        return encode_keys(self.keys)


def encode_keys(keys: list[Motif]) -> Tensor:
    rows = []
    for kind, *labels in keys:
        if len(labels) > KEY_WIDTH - 2:
            raise ValueError(f"motif with {len(labels)} labels does not fit the key encoding")
        rows.append([kind, len(labels), *labels] + [-1] * (KEY_WIDTH - 2 - len(labels)))
    return torch.tensor(rows, dtype=torch.long).view(-1, KEY_WIDTH)


def decode_keys(encoded: Tensor) -> list[Motif]:
    return [(int(r[0]), *(int(v) for v in r[2:2 + int(r[1])])) for r in encoded]


def build_vocabulary(graphs: list[Data], keep_fraction: float = 0.9,
                     max_ring: int = 4) -> MotifVocabulary:
    """Rank motifs by mean TF-IDF over the graphs containing them and keep the top fraction.

    TF-IDF of motif k in graph G is count(k, G) * (log((1 + |D|) / (1 + n_k)) + 1), with n_k the
    number of graphs containing k (the +1 inside the bracket, as FGFL's code computes it).
    """
    per_graph = [graph_motifs(g, max_ring) for g in graphs]
    containing = Counter(k for counts in per_graph for k in counts)
    idf = {k: math.log((1 + len(graphs)) / (1 + n)) + 1 for k, n in containing.items()}
    score = {k: sum(c[k] for c in per_graph if k in c) * idf[k] / containing[k]
             for k in containing}
    ranked = sorted(containing, key=lambda k: (-score[k], k))
    keys = ranked[:math.floor(keep_fraction * len(ranked))]
    membership = torch.tensor([[k in counts for k in keys] for counts in per_graph],
                              dtype=torch.bool).view(len(graphs), len(keys))
    return MotifVocabulary(keys, membership)
