"""The heterogeneity card of a partition: how much its clients differ, in a few numbers.

Papers describe their partitions' heterogeneity by hand, each its own way; the card puts the
usual measures side by side for any node- or graph-level partition. Over K clients, where an
*item* is a node (node level) or a graph (graph level) and a client's items are all it holds
(train, validation and test alike: the data the client brings, not the share it trains on):

- ``clients``: K.
- ``size_gini``: quantity skew, the Gini coefficient of the client sizes n_i (items held),
  G = Σ_i Σ_j |n_i − n_j| / (2 K² n̄): 0 when every client holds as many items, (K − 1)/K
  when one holds them all (Gini 1912).
- ``label_jsd_mean``: label skew, the mean over client pairs of the Jensen–Shannon divergence
  JSD(P_i ‖ P_j) = ½ KL(P_i ‖ M) + ½ KL(P_j ‖ M), M = ½ (P_i + P_j), of the clients' label
  distributions P_i, in bits (base 2, so in [0, 1]; Lin 1991). SciPy's ``jensenshannon``
  returns the distance, the divergence's square root: it is squared here.
- ``label_jsd_to_global``: the mean over clients of JSD(P_i ‖ P), P the label distribution of
  the union of the clients' items (an item two clients share counted once): how far each
  client is from the task the federation learns as a whole. Both are null on a regression
  dataset (real targets, no label distribution).
- ``feature_mmd``: feature shift, the mean over client pairs of the squared maximum mean
  discrepancy of their feature samples X_i, X_j with a Gaussian kernel
  k(x, y) = exp(−‖x − y‖² / (2σ²)), MMD² = mean k(X_i, X_i) + mean k(X_j, X_j) − 2 mean
  k(X_i, X_j) (the biased estimate of Gretton et al., "A Kernel Two-Sample Test", JMLR 2012:
  0 for identical samples, never negative), σ² the median of the non-zero squared distances
  between the sampled items of all clients (their median heuristic; one σ for every pair, so
  that the pairs compare). It runs on a seeded sample: at most ``MMD_CLIENTS`` clients, each
  with at most ``MMD_PER_CLIENT`` of its items, so that its cost is bounded and partitions of
  any number of clients compare (the biased estimate grows by O(1/m) at m items a client, so a
  client holding fewer items reads more shifted). A graph's item is the mean of its node
  features.
- ``homophily_mean``, ``homophily_std``: structure, the edge homophily of each client's own
  graph h_i = |{(u, v) ∈ E_i : y_u = y_v}| / |E_i| (Zhu et al., NeurIPS 2020), its mean and
  population standard deviation over the clients with an edge. Node level only: graph-level
  datasets label graphs, not nodes, so no edge joins two labels (null).
- ``edges_lost``: the share of the split graph's edges that no client holds, because their ends
  went to different clients or one end to no client (the global test set, the server's pool,
  nodes a partition drops). Node level only: a graph-level partition deals whole graphs and
  cuts no edge (null).
- ``overlap``: the share of the items held by any client that more than one client holds;
  null for a partition whose clients share nothing.

The pairwise label JSD runs over every client up to ``PAIR_CLIENTS`` clients, beyond that
over a seeded sample of that many, so that ten thousand clients stay seconds. A measure that needs
what the partition lacks (two clients with items, an edge) is null. ``stored_card`` keeps the
card beside the partition artifact, so a reload reads it instead of computing it again.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import cast

import numpy as np
import torch
from scipy.spatial.distance import jensenshannon
from torch_geometric.data import Data

from graphfed.data.datasets import GraphDataset, unwritable_cache
from graphfed.data.federated import SPLITS, FederatedData, GraphClient, NodeClient, artifact_path
from graphfed.data.stats import edge_homophily

log = logging.getLogger(__name__)

MEANINGS = {  # each measure of the card, as a table's reader needs it
    "clients": "number of clients",
    "size_gini": "Gini of the client sizes (0: all equal)",
    "label_jsd_mean": "label JSD in bits, mean over client pairs",
    "label_jsd_to_global": "label JSD in bits, client to all, mean",
    "feature_mmd": "feature MMD² (Gaussian, sampled), mean over pairs",
    "homophily_mean": "edge homophily of a client's graph, mean",
    "homophily_std": "edge homophily, std over clients",
    "edges_lost": "share of the graph's edges held by no client",
    "overlap": "share of held items held by several clients",
}
CARD_KEYS = tuple(MEANINGS)
CARD_VERSION = 1  # a stored card of another version is computed again
PAIR_CLIENTS = 256
MMD_CLIENTS = 16
MMD_PER_CLIENT = 128
SAMPLE_SEED = 0  # the card describes the partition, whatever seed a run trains with


def gini(sizes: np.ndarray) -> float:
    """Gini coefficient of non-negative ``sizes`` (0 for equal sizes; 0 when all are 0)."""
    x = np.sort(np.asarray(sizes, dtype=np.float64))
    n, total = len(x), x.sum()
    if total == 0:
        return 0.0
    # the sorted form of Σ_i Σ_j |x_i − x_j| / (2 n² x̄)
    return float(2 * np.sum(np.arange(1, n + 1) * x) / (n * total) - (n + 1) / n)


def jsd(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Jensen–Shannon divergence in bits between the distributions in the last axis."""
    return jensenshannon(p, q, axis=-1, base=2) ** 2


def mean_pairwise_jsd(distributions: np.ndarray) -> float | None:
    """Mean JSD over the pairs of rows of ``distributions`` (None for fewer than two)."""
    i, j = np.triu_indices(len(distributions), k=1)
    return float(jsd(distributions[i], distributions[j]).mean()) if len(i) else None


def mean_pairwise_mmd(samples: list[np.ndarray]) -> float | None:
    """Mean biased MMD² over the pairs of ``samples`` (rows items, columns features) with a
    Gaussian kernel of median-heuristic bandwidth over all of them (None for fewer than two)."""
    if len(samples) < 2:
        return None
    x = np.concatenate(samples).astype(np.float32)  # single precision: the Gram matrix is the cost
    norms = np.einsum("ij,ij->i", x, x)
    squared = np.maximum(norms[:, None] + norms[None, :] - 2 * x @ x.T, 0.0).astype(np.float64)
    upper = squared[np.triu_indices(len(x), k=1)]
    positive = upper[upper > 0]
    median = float(np.median(positive)) if len(positive) else 1.0  # all equal: any σ gives 0
    kernel = np.exp(-squared / (2 * median))
    owner = np.repeat(np.arange(len(samples)), [len(s) for s in samples])
    member = np.zeros((len(x), len(samples)))
    member[np.arange(len(x)), owner] = 1.0 / np.bincount(owner)[owner]
    block = member.T @ kernel @ member  # block[a, b]: mean k(X_a, X_b)
    a, b = np.triu_indices(len(samples), k=1)
    return float((block[a, a] + block[b, b] - 2 * block[a, b]).mean())


def _items(client: NodeClient | GraphClient) -> tuple[np.ndarray, np.ndarray]:
    """A client's item ids (in the dataset) and their labels, in one order."""
    if isinstance(client, NodeClient):
        return client.global_ids.numpy(), client.graph.y.numpy()
    return (torch.cat([client.global_ids[s] for s in SPLITS]).numpy(),
            torch.cat([client.labels(s) for s in SPLITS]).numpy())


def _features(client: NodeClient | GraphClient, rows: np.ndarray) -> np.ndarray:
    """The features of a client's items at positions ``rows`` (of ``_items``'s order): a node's
    own, a graph's mean node feature."""
    if isinstance(client, NodeClient):
        return client.graph.x.numpy()[rows]  # NumPy's gather: torch's costs ms per call
    graphs = [g for s in SPLITS for g in client.graphs[s]]
    return np.stack([graphs[r].x.numpy().mean(axis=0) for r in rows])


def _has_features(client: NodeClient | GraphClient) -> bool:
    """Whether every item of ``client`` has a feature vector (a graph: a node to average)."""
    if isinstance(client, NodeClient):
        return client.graph.x is not None
    return all(g.x is not None and g.num_nodes > 0 for s in SPLITS for g in client.graphs[s])


def _feature_samples(data: FederatedData, chosen: np.ndarray, sizes: np.ndarray,
                     rng: np.random.Generator) -> list[np.ndarray]:
    """Features of at most ``MMD_PER_CLIENT`` items of at most ``MMD_CLIENTS`` of the
    ``chosen`` clients, drawn by ``rng``."""
    if len(chosen) > MMD_CLIENTS:
        chosen = np.sort(rng.choice(chosen, MMD_CLIENTS, replace=False))
    return [_features(data.clients[i],
                      np.sort(rng.choice(sizes[i], min(MMD_PER_CLIENT, sizes[i]), replace=False)))
            for i in chosen.tolist()]


def _edges_lost(data: FederatedData, graph: Data, overlapping: bool) -> float | None:
    """Share of the split ``graph``'s edges (its directed entries) inside no client."""
    total_edges = int(graph.edge_index.size(1))
    if total_edges == 0:
        return None
    clients = [c for c in data.clients if isinstance(c, NodeClient)]
    if not overlapping:  # each edge is inside one client at most
        held = sum(int(c.graph.edge_index.size(1)) for c in clients)
    else:
        pairs = torch.cat([c.global_ids[c.graph.edge_index] for c in clients], dim=1)
        held = len(np.unique(pairs[0].numpy() * graph.num_nodes + pairs[1].numpy()))
    return 1.0 - held / total_edges


def _label_skew(items: list[tuple[np.ndarray, np.ndarray]], num_classes: int,
                chosen: np.ndarray) -> dict:
    """``label_jsd_mean`` over the ``chosen`` clients (all holding items) and
    ``label_jsd_to_global`` over every client holding items, from each client's (item ids,
    labels)."""
    counts = np.stack([np.bincount(y, minlength=num_classes) for _, y in items])
    sizes = counts.sum(axis=1)
    if not sizes.any():
        return {"label_jsd_mean": None, "label_jsd_to_global": None}
    _, first = np.unique(np.concatenate([i for i, _ in items]), return_index=True)
    # the union's labels: an item two clients share counted once
    union = np.bincount(np.concatenate([y for _, y in items])[first], minlength=num_classes)
    held = sizes > 0
    return {"label_jsd_mean": mean_pairwise_jsd(counts[chosen] / sizes[chosen, None]),
            "label_jsd_to_global": float(jsd(counts[held] / sizes[held, None],
                                              union / union.sum()).mean())}


def card(data: FederatedData, source: GraphDataset) -> dict:
    """The heterogeneity card of ``data``, a partition of ``source`` (whose graph's edge count
    ``edges_lost`` is a share of), with the keys ``CARD_KEYS``; a measure that does not apply
    is None."""
    items = [_items(c) for c in data.clients]
    sizes = np.array([len(ids) for ids, _ in items])
    holders = np.bincount(np.concatenate([ids for ids, _ in items]))
    shared, held = int((holders > 1).sum()), int((holders > 0).sum())
    rng = np.random.default_rng(SAMPLE_SEED)
    nonempty = np.flatnonzero(sizes)
    chosen = (nonempty if len(nonempty) <= PAIR_CLIENTS
              else np.sort(rng.choice(nonempty, PAIR_CLIENTS, replace=False)))
    out = {"clients": data.num_clients, "size_gini": gini(sizes),
           **(_label_skew(items, data.num_classes, chosen) if source.task == "classification"
              else {"label_jsd_mean": None, "label_jsd_to_global": None}),
           "feature_mmd": (mean_pairwise_mmd(_feature_samples(data, chosen, sizes, rng))
                           if all(_has_features(c) for c in data.clients) else None),
           "homophily_mean": None, "homophily_std": None, "edges_lost": None,
           "overlap": shared / held if shared else None}
    if data.level in ("node", "edge"):  # an edge-level run's clients are its node partition's
        h = np.array([edge_homophily(c.graph.edge_index, c.graph.y) for c in data.clients
                      if isinstance(c, NodeClient)])
        h = h[~np.isnan(h)]
        if len(h):
            out.update(homophily_mean=float(h.mean()), homophily_std=float(h.std()))
        out["edges_lost"] = _edges_lost(data, cast(Data, source.graph), shared > 0)
    return out


def is_card(value: object) -> bool:
    """Whether ``value`` reads as a card: every key of ``CARD_KEYS``, each a number or None."""
    return isinstance(value, dict) and set(value) == set(CARD_KEYS) and all(
        v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))
        for v in value.values())


def card_path(partition_id: str, features: str) -> Path:
    """Where the card of a partition's clients with ``features`` treatment is kept: beside the
    artifact (the artifact holds ids, not features, so one serves every treatment)."""
    return artifact_path(partition_id).with_name(f"{partition_id}.{features}.card.json")


def stored_card(data: FederatedData, source: GraphDataset, features: str) -> dict:
    """``card`` of ``data``, read from beside its artifact when computed before, else computed
    and kept there (a damaged or outdated file is computed again)."""
    path = card_path(data.partition_id, features)
    try:
        kept = json.loads(path.read_text())
        if isinstance(kept, dict) and kept.get("version") == CARD_VERSION \
                and is_card(kept.get("card")):
            return kept["card"]
    except (OSError, ValueError):
        pass  # none yet, or unreadable: computed again below
    result = card(data, source)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")  # concurrent runs: one file each
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps({"version": CARD_VERSION, "card": result}))
        tmp.replace(path)
    except OSError as e:  # a read-only cache costs a recomputation next time, never the run
        log.warning("%s", unwritable_cache(f"the heterogeneity card of {data.partition_id}", e))
    return result
