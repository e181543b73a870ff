"""The shape of a partition that decides the whole split itself (global test, clients, their
local tests) instead of the usual global-test cut and per-client ratios."""

from __future__ import annotations

from dataclasses import dataclass

import torch

TRAIN, VAL, TEST = 0, 1, 2
UNSPLIT = 3  # a node its client holds (features, edges) in none of the three splits


@dataclass
class SplitPlan:
    """Global test ids, client ids and their split codes (TRAIN/VAL/TEST); ``public_ids``: the
    nodes the server holds itself (in no client, not tested); ``overlap``: the clients' true
    pairwise overlap ratios (``overlap_ratios.true_overlap``) where clients share nodes."""

    global_test: torch.Tensor
    client_ids: list[torch.Tensor]
    client_splits: list[torch.Tensor]
    edge_relabel: torch.Tensor | None = None  # node ids of the graph that was split, if renumbered
    public_ids: torch.Tensor | None = None
    overlap: dict[str, torch.Tensor] | None = None
