"""Label-skew assignments shared by node-level and graph-level partitions.

Each function maps items (nodes or graphs) to clients and returns one index tensor per client.
"""

from __future__ import annotations

import numpy as np
import torch

from graphfed.errors import GraphfedError


def dirichlet_draw(y: np.ndarray, classes: np.ndarray, num_clients: int, alpha: float,
                   rng: np.random.Generator) -> list[list[int]]:
    """One Dirichlet label-skew draw: for each class of ``classes``, its positions in ``y``
    shuffled and cut over the clients by proportions from Dir(alpha·1); every item to exactly
    one client (which may be left empty)."""
    parts: list[list[int]] = [[] for _ in range(num_clients)]
    for c in classes:
        items = rng.permutation(np.nonzero(y == c)[0])
        proportions = rng.dirichlet(np.full(num_clients, alpha))
        cuts = (np.cumsum(proportions)[:-1] * len(items)).astype(int)
        for k, chunk in enumerate(np.split(items, cuts)):
            parts[k].extend(chunk.tolist())
    return parts


def dirichlet_split(labels: torch.Tensor, num_clients: int, alpha: float,
                    rng: np.random.Generator, min_size: int = 1,
                    max_tries: int = 100) -> list[torch.Tensor]:
    """For each class, split its items over clients with proportions drawn from Dir(alpha).

    Draws again until every client holds at least ``min_size`` items (small alpha can leave a
    client empty), as the usual non-IID benchmarks do.
    """
    y = labels.cpu().numpy()
    classes = np.unique(y)
    if min_size * num_clients > len(y):
        raise GraphfedError(
            f"dirichlet partition: {num_clients} clients x min_size {min_size} exceeds the "
            f"{len(y)} items available")
    for _ in range(max_tries):
        parts = dirichlet_draw(y, classes, num_clients, alpha, rng)
        if min(len(p) for p in parts) >= min_size:
            return [torch.tensor(sorted(p), dtype=torch.long) for p in parts]
    raise GraphfedError(
        f"dirichlet partition: could not give every client {min_size} items with alpha={alpha} "
        f"in {max_tries} draws; raise alpha or lower min_size")


def uniform_split(num_items: int, num_clients: int,
                  rng: np.random.Generator) -> list[torch.Tensor]:
    """Shuffle the items and deal them into clients of (almost) equal size."""
    if num_items < num_clients:
        raise GraphfedError(f"uniform partition: {num_clients} clients but only {num_items} items")
    order = rng.permutation(num_items)
    return [torch.tensor(sorted(chunk.tolist()), dtype=torch.long)
            for chunk in np.array_split(order, num_clients)]
