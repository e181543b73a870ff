"""Graph-level data simulation helpers: structure perturbation of a client's graphs."""

from __future__ import annotations

import numpy as np
import torch
from torch_geometric.utils import to_undirected

from graphfed.data.partition.plan import TEST, TRAIN, SplitPlan
from graphfed.errors import GraphfedError


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


def gcfl_chunk_split(num_items: int, num_clients: int, chunk: int,
                     rng: np.random.Generator) -> list[torch.Tensor]:
    """GCFL's one-dataset assignment (as FGFL's code inherits it): client j first takes the
    consecutive items [chunk*j, chunk*(j+1)) in dataset order, then every remaining item goes to
    a client drawn uniformly at random. TU files are sorted by class, so this skews labels."""
    if num_clients * chunk > num_items:
        raise GraphfedError(
            f"gcfl_chunk partition: {num_clients} clients x chunk {chunk} exceeds the "
            f"{num_items} graphs available; lower partition.chunk or num_clients")
    owners = rng.integers(0, num_clients, num_items - num_clients * chunk)
    return [torch.as_tensor(ids, dtype=torch.long)
            for ids in _chunks_then_owners(num_clients, chunk, owners)]


def _chunks_then_owners(num_clients: int, chunk: int, owners: np.ndarray) -> list[np.ndarray]:
    """Client j's items: [chunk*j, chunk*(j+1)), then the leftover items (from chunk*N on, in
    order) whose drawn owner is j. Both GCFL splits share this; they differ in how they draw."""
    rest = np.arange(num_clients * chunk, num_clients * chunk + len(owners))
    return [np.concatenate([np.arange(j * chunk, (j + 1) * chunk), rest[owners == j]])
            for j in range(num_clients)]


def _shuffle_cut(items: list[int], train: float, test: float,
                 seed: int) -> tuple[list[int], list[int]]:
    """scikit-learn's ``train_test_split(items, train_size=train, test_size=test, shuffle=True,
    random_state=seed)``, replayed: one permutation from a fresh legacy RNG, the first
    ``ceil(test * n)`` entries test, the next ``floor(train * n)`` train."""
    n = len(items)
    n_test, n_train = int(np.ceil(test * n)), int(np.floor(train * n))
    order = np.random.RandomState(seed).permutation(n)
    return ([items[i] for i in order[n_test:n_test + n_train]],
            [items[i] for i in order[:n_test]])


def gcfl_code_split(num_graphs: int, num_clients: int, seed: int) -> SplitPlan:
    """The split FGFL's code (GCFL's ``prepareData_oneDS``) draws, replayed draw for draw so the
    same ``seed`` (the code fixes 123 for every repeat) gives the same graphs: chunks of
    ``min(50, n / N)`` consecutive graphs, one legacy ``randint`` per leftover graph, then per
    agent an 80/20 and a 50/50 shuffle cut into train, validation and test. The code has no
    global test set; the agents' validation graphs (10 % of all, never trained on) become it."""
    draws = np.random.RandomState(seed)
    chunk = min(50, num_graphs // num_clients)
    owners = np.array([draws.randint(low=0, high=num_clients, size=1)[0]  # one call per graph
                       for _ in range(num_graphs - num_clients * chunk)], dtype=np.int64)
    client_ids, client_splits, val = [], [], []
    for ids in (c.tolist() for c in _chunks_then_owners(num_clients, chunk, owners)):
        train, held_out = _shuffle_cut(ids, 0.8, 0.2, seed)
        agent_val, agent_test = _shuffle_cut(held_out, 0.5, 0.5, seed)
        client_ids.append(torch.tensor(train + agent_test, dtype=torch.long))
        client_splits.append(torch.tensor([TRAIN] * len(train) + [TEST] * len(agent_test)))
        val.extend(agent_val)
    return SplitPlan(torch.tensor(sorted(val), dtype=torch.long), client_ids, client_splits)


QUALITY_TIERS = {"low": (0.7, 1.0), "medium": (0.3, 0.7), "high": (0.0, 0.3)}


def quality_tier_flips(num_clients: int, seed: int = 0
                       ) -> tuple[list[float], dict[str, list[int]]]:
    """FGFL's perturbed setting: 30% of agents 'low' quality (edge-flip ratio ~ U[0.7, 1)), 30%
    'medium' (U[0.3, 0.7)), the rest 'high' (U[0, 0.3)); 3/3/4 for 10 agents. Returns the ratio
    of each agent (in agent order: low first) and the agents of each group."""
    rng = np.random.default_rng(seed)
    low = medium = round(0.3 * num_clients)
    sizes = {"low": low, "medium": medium, "high": num_clients - low - medium}
    ratios: list[float] = []
    groups: dict[str, list[int]] = {}
    for name, (lo, hi) in QUALITY_TIERS.items():
        groups[name] = list(range(len(ratios), len(ratios) + sizes[name]))
        ratios.extend(round(float(r), 4) for r in rng.uniform(lo, hi, sizes[name]))
    return ratios, groups
