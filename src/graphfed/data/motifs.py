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
from typing import Literal

import networkx as nx
import torch
from torch import Tensor
from torch_geometric.data import Data

Motif = tuple[int, ...]  # (kind, label, label, ...): kind 0 = bond, 1 = ring
BOND, RING = 0, 1
KEY_WIDTH = 6  # kind, length, up to 4 labels (wider when longer rings are kept)
TfidfOne = Literal["in_idf", "after_count"]


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
    """Rows of KEY_WIDTH, or as wide as the longest key when a ring has more than 4 labels."""
    width = max([KEY_WIDTH, *(len(k) + 1 for k in keys)])
    rows = [[kind, len(labels), *labels] + [-1] * (width - 2 - len(labels))
            for kind, *labels in keys]
    return torch.tensor(rows, dtype=torch.long).view(-1, width)


def decode_keys(encoded: Tensor) -> list[Motif]:
    return [(int(r[0]), *(int(v) for v in r[2:2 + int(r[1])])) for r in encoded]


def mean_tfidf(total: int, num_graphs: int, containing: int, one: TfidfOne = "in_idf") -> float:
    """T_k (Eq. 17): the mean over the ``containing`` graphs holding motif k of its TF-IDF,
    from the motif's ``total`` count in them and ``num_graphs`` = |D|. Per graph, TF-IDF is
    count * (log((1 + |D|) / (1 + n_k)) + 1) with the +1 in the bracket (``in_idf``: FGFL's
    code, ``client.py`` ``motif_construction``), or count * log((1 + |D|) / (1 + n_k)) + 1
    (``after_count``: the paper's Eq. 16 as printed)."""
    idf = math.log((1 + num_graphs) / (1 + containing))
    if one == "in_idf":
        return total * (idf + 1) / containing
    return total * idf / containing + 1


def build_vocabulary(graphs: list[Data], keep_fraction: float = 0.9, max_ring: int = 4,
                     tfidf_one: TfidfOne = "in_idf") -> MotifVocabulary:
    """Rank motifs by their mean TF-IDF (``mean_tfidf``) and keep the top fraction."""
    per_graph = [graph_motifs(g, max_ring) for g in graphs]
    containing = Counter(k for counts in per_graph for k in counts)
    score = {k: mean_tfidf(sum(c[k] for c in per_graph if k in c), len(graphs), n, tfidf_one)
             for k, n in containing.items()}
    ranked = sorted(containing, key=lambda k: (-score[k], k))
    keys = ranked[:math.floor(keep_fraction * len(ranked))]
    membership = torch.tensor([[k in counts for k in keys] for counts in per_graph],
                              dtype=torch.bool).view(len(graphs), len(keys))
    return MotifVocabulary(keys, membership)
