"""FairGFL's overlapping-subgraph simulation (Zhou et al., "FairGFL", IEEE TPDS 2025, Sec. VII-A;
spec ``fairgfl.md`` §4 "Partition", §7.1-6, §7.5 F5/F14).

The nodes are cut, in one random order, into a global test set, a public pool the server holds
(in no client, not tested), and the rest. A share ``overlap_ratio`` of the rest is the
overlapping pool O; the other nodes are dealt by Dirichlet label skew, each to exactly one
client. Clients then draw pool nodes *independently of each other*, so a pool node can be held
by several clients (or by none): that is what makes the subgraphs overlap. Every client holds the
induced subgraph of the global graph on its nodes, and every client node is a training node, so
no node is a test node at one client and a training node at another (§7.1-6).

RECONSTRUCTED (the paper's symbols were stripped): how many pool nodes of label ℓ client i draws.

* ``per_label`` (default): per label, q_ℓ ~ Dir(α·1_N) over the clients and
  n_{i,ℓ} = round(c_i·|O_ℓ|·q_{ℓ,i}), so each pool node is held by about c clients on average and
  the clients' shares of the overlap are as skewed as α makes them;
* ``per_client``: per client, q_i ~ Dir(α·1_L) over the labels and
  n_{i,ℓ} = round(c_i·|O|/N·q_{i,ℓ}): the same total, every client the same amount of overlap
  (only its labels skewed).

Both cap n_{i,ℓ} at |O_ℓ| and draw without replacement from O_ℓ, as the paper says. c_i is the
coefficient of client i's overlap group (``overlap_groups``, clients in order), or c for all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch
from torch_geometric.data import Data

from graphfed.data.partition.label_skew import dirichlet_draw
from graphfed.data.partition.overlap_ratios import true_overlap
from graphfed.data.partition.plan import TRAIN, SplitPlan
from graphfed.errors import GraphfedError

PoolDraw = Literal["per_label", "per_client"]


@dataclass
class OverlapSplit:
    """The split's node ids (all in the graph's ids, sorted): ``pool`` is the overlapping pool
    O, whose nodes are the only ones a client may share with another."""

    global_test: np.ndarray
    public: np.ndarray
    pool: np.ndarray
    client_ids: list[np.ndarray]


def group_coefficients(groups: Sequence[tuple[float, float]], num_clients: int) -> np.ndarray:
    """Each client's overlap coefficient from ``(fraction, coefficient)`` groups: the clients
    in order, group g taking clients up to round(N · (fraction of groups 0..g))."""
    bounds = np.rint(np.cumsum([f for f, _ in groups]) * num_clients).astype(int)
    bounds[-1] = num_clients
    sizes = np.diff(bounds, prepend=0)
    if (sizes < 1).any():
        g = int(np.argmax(sizes < 1))
        raise GraphfedError(
            f"partition.overlap_groups: group {g} (fraction {groups[g][0]}) gets no client of "
            f"{num_clients}; raise num_clients or merge the groups")
    return np.repeat([c for _, c in groups], sizes).astype(float)


def _pool_counts(y: np.ndarray, pool: np.ndarray, classes: np.ndarray, coefficients: np.ndarray,
                 alpha: float, draw: PoolDraw, rng: np.random.Generator) -> np.ndarray:
    """n_{i,ℓ} (clients × ``classes``): how many pool nodes of each label each client draws."""
    available = np.array([(y[pool] == c).sum() for c in classes])
    n = len(coefficients)
    if draw == "per_label":
        shares = rng.dirichlet(np.full(n, alpha), size=len(classes)).T  # q_{ℓ,i}, clients × L
        wanted = coefficients[:, None] * available[None, :] * shares
    else:
        shares = rng.dirichlet(np.full(len(classes), alpha), size=n)  # q_{i,ℓ}
        wanted = coefficients[:, None] * (len(pool) / n) * shares
    return np.minimum(np.rint(wanted).astype(int), available[None, :])


def _assign(y: np.ndarray, private: np.ndarray, pool: np.ndarray, coefficients: np.ndarray,
            alpha: float, draw: PoolDraw, rng: np.random.Generator) -> list[np.ndarray]:
    """One draw of every client's nodes: its Dirichlet share of ``private`` and its pool picks."""
    n = len(coefficients)
    parts = dirichlet_draw(y[private], np.unique(y), n, alpha, rng)
    held = [list(private[p]) for p in parts]
    classes = np.unique(y[pool])
    counts = _pool_counts(y, pool, classes, coefficients, alpha, draw, rng)
    for k, c in enumerate(classes):
        of_label = pool[y[pool] == c]
        for i in range(n):
            held[i].extend(rng.choice(of_label, counts[i, k], replace=False).tolist())
    return [np.sort(np.array(h, dtype=np.int64)) for h in held]


def overlap_split(labels: torch.Tensor, test_fraction: float, public_fraction: float,
                  overlap_ratio: float, alpha: float, coefficients: np.ndarray, draw: PoolDraw,
                  rng: np.random.Generator, max_tries: int = 100) -> OverlapSplit:
    """The split for ``len(coefficients)`` clients. A draw that leaves a client without any node
    is drawn again (the usual non-IID practice, as ``dirichlet_split``); after ``max_tries``
    the options are refused."""
    y = labels.cpu().numpy()
    order = rng.permutation(len(y))
    n_test, n_public = round(test_fraction * len(y)), round(public_fraction * len(y))
    rest = order[n_test + n_public:]
    n_pool = round(overlap_ratio * len(rest))
    pool, private = rest[:n_pool], rest[n_pool:]
    for _ in range(max_tries):
        client_ids = _assign(y, private, pool, coefficients, alpha, draw, rng)
        if all(len(ids) for ids in client_ids):
            return OverlapSplit(np.sort(order[:n_test]), np.sort(order[n_test:n_test + n_public]),
                                np.sort(pool), client_ids)
    raise GraphfedError(
        f"fairgfl_overlap partition: some of the {len(coefficients)} clients got no node in "
        f"{max_tries} draws (alpha={alpha}, {len(private)} non-overlapping and {len(pool)} pool "
        "nodes); raise partition.alpha, lower partition.overlap_ratio, partition.test_fraction "
        "or partition.public_fraction, or use fewer clients")


def overlap_plan(graph: Data, test_fraction: float, public_fraction: float,
                 overlap_ratio: float, alpha: float, coefficients: np.ndarray, draw: PoolDraw,
                 rng: np.random.Generator) -> SplitPlan:
    """``overlap_split`` as a plan: every client node TRAIN, the public pool and the true
    pairwise overlap ratios (``true_overlap``) kept with it."""
    split = overlap_split(graph.y, test_fraction, public_fraction, overlap_ratio, alpha,
                          coefficients, draw, rng)
    client_ids = [torch.as_tensor(ids, dtype=torch.long) for ids in split.client_ids]
    return SplitPlan(torch.as_tensor(split.global_test, dtype=torch.long), client_ids,
                     [torch.full((len(ids),), TRAIN, dtype=torch.long) for ids in client_ids],
                     public_ids=torch.as_tensor(split.public, dtype=torch.long),
                     overlap=true_overlap(graph.edge_index, graph.num_nodes, client_ids))
