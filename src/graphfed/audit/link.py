"""Link stealing (He et al., USENIX Security 2021, "Stealing Links from Graph Neural Networks",
the unsupervised attack-0): a GNN mixes each node's features with its neighbours', so the
posteriors of two linked nodes look alike. The score of a node pair is the Pearson correlation
of the released model's posteriors of its two nodes (1 minus the correlation distance, the
distance that attack-0 found best on most data sets); the candidates are the edges of each
client's graph and as many sampled non-edges. Node level only."""

from __future__ import annotations

import numpy as np
from torch import Tensor

from graphfed.audit.scoring import AttackResult, attack_result, posteriors
from graphfed.audit.target import AuditedRun, node_logits
from graphfed.errors import GraphfedError

MAX_EDGES = 2000  # per client: enough pairs for a steady AUC at a bounded cost on large graphs
THREAT_MODEL = ("black-box posteriors of the released model on the nodes of each client's graph "
                "(the model run on that graph), and the node pairs to rank: the client's edges "
                "and as many non-edges")


def undirected_edges(edge_index: Tensor) -> np.ndarray:
    """The distinct node pairs (u < v) of ``edge_index``, self-loops left out."""
    pairs = np.sort(edge_index.t().cpu().numpy(), axis=1)
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    return np.unique(pairs, axis=0).reshape(-1, 2)


def non_edges(edges: np.ndarray, nodes: int, count: int, rng: np.random.Generator
              ) -> np.ndarray:
    """``count`` distinct node pairs (u < v) of a graph of ``nodes`` nodes that are not among
    its ``edges``, uniformly drawn (fewer where the graph has fewer)."""
    count = min(count, nodes * (nodes - 1) // 2 - len(edges))
    taken = set((edges[:, 0] * nodes + edges[:, 1]).tolist())
    found: list[int] = []
    while len(found) < count:
        u, v = rng.integers(0, nodes, size=(2, 2 * (count - len(found))))
        for code in (np.minimum(u, v) * nodes + np.maximum(u, v))[u != v].tolist():
            if code not in taken and len(found) < count:
                taken.add(code)
                found.append(code)
    codes = np.array(found, dtype=np.int64)
    return np.stack([codes // nodes, codes % nodes], axis=1).reshape(-1, 2)


def correlation(probabilities: np.ndarray, pairs: np.ndarray) -> np.ndarray:
    """The Pearson correlation of the two rows of ``probabilities`` each pair names (0 where a
    row is constant: nothing to correlate)."""
    a = probabilities[pairs[:, 0]]
    b = probabilities[pairs[:, 1]]
    a = a - a.mean(axis=1, keepdims=True)
    b = b - b.mean(axis=1, keepdims=True)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    return np.divide((a * b).sum(axis=1), norms, out=np.zeros(len(pairs)), where=norms > 0)


def link_stealing(run: AuditedRun) -> AttackResult:
    """Attack-0 on every client's graph (up to ``MAX_EDGES`` edges each, as many non-edges),
    pooled into one ROC."""
    if run.fed.data.level != "node":
        raise GraphfedError("--attack link steals the edges of a node-level graph; "
                            f"{run.config.dataset} is a graph-level run")
    scores, positive = [], []
    for client, ctx in enumerate(run.runtime.contexts):
        raw = ctx.node_data()
        edges = undirected_edges(raw.graph.edge_index)
        rng = run.rng(client, 1)
        if len(edges) > MAX_EDGES:
            edges = edges[np.sort(rng.choice(len(edges), MAX_EDGES, replace=False))]
        others = non_edges(edges, raw.graph.num_nodes, len(edges), rng)
        if not len(edges) or not len(others):
            continue
        probabilities = posteriors(node_logits(run.fed, run.params[client], client)).cpu()
        pairs = np.concatenate([edges, others])
        scores.append(correlation(probabilities.numpy(), pairs))
        positive.append(np.r_[np.ones(len(edges), bool), np.zeros(len(others), bool)])
    if not scores:
        raise GraphfedError("--attack link: no client graph has both edges and non-edges")
    return attack_result("link", np.concatenate(scores), np.concatenate(positive), THREAT_MODEL)
