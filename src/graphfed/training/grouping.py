"""Which clients share a padded pass: groups of similar size, chosen by a cost model that
weighs the rows padding adds against what one more pass costs, as the device's plan
(``training.plans``) prices them. Training and evaluation group their clients alike."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TypeVar, cast

from torch import Tensor, nn

from graphfed.models.sparse import is_csr
from graphfed.training import plans
from graphfed.training.batches import PreparedClient, PreparedEdgeClient, PreparedNodeClient
from graphfed.training.padded import Cache
from graphfed.training.trainer import Trainer

R = TypeVar("R")


def step_size(data: PreparedClient, batch_size: int | None) -> float:
    """The nodes a client brings to one padded step: its whole graph (node level, and the
    edge level's training graph), or about one mini-batch's share of its training graphs'
    nodes (graph level)."""
    if isinstance(data, PreparedNodeClient):
        return float(len(data.y))
    if isinstance(data, PreparedEdgeClient):
        return float(data.num_nodes)
    graphs = data.splits["train"]
    if graphs.num_graphs == 0:
        return 0.0
    share = 1.0 if batch_size is None else min(1.0, batch_size / graphs.num_graphs)
    return len(graphs.x) * share


# sizes within this factor of each other are one run of ``size_groups``' search
RUN_SPREAD = 1.01


def size_groups(sizes: list[float], spread: float, pass_rows: float = math.inf,
                max_rows: float = math.inf) -> list[list[int]]:
    """Positions of ``sizes`` in groups, each padded to its largest member, that cost the
    fewest padded rows plus ``pass_rows`` a group (what one more pass costs, in rows), with no
    group's largest more than ``spread`` times its smallest (one client of 6,224 nodes beside
    nine of 300-2,300 would otherwise pad them all to its size) and none padded to more than
    ``max_rows`` rows unless it is one client. Groups are runs of the sizes sorted largest
    first, found by dynamic programming over runs of sizes within 1% of each other (padded to
    the run's largest, and cut where ``max_rows`` says), so ten thousand similar clients cost
    a few hundred steps, not a hundred million. ``pass_rows`` infinite: as few groups as the
    bounds allow."""
    order = sorted(range(len(sizes)), key=lambda k: -sizes[k])
    runs: list[list[int]] = []  # positions, largest first, within 1% of their run's first
    for k in order:
        if (runs and sizes[k] * RUN_SPREAD >= sizes[runs[-1][0]]
                and (len(runs[-1]) + 1) * sizes[runs[-1][0]] <= max_rows):
            runs[-1].append(k)
        else:
            runs.append([k])
    # cost[j]: (groups, padded rows) of the best grouping of runs[:j]; compared as rows
    # weighted by pass_rows, or groups first where a pass is worth more than any padding
    cost: list[tuple[int, float]] = [(0, 0.0)]
    start: list[int] = [0]
    for j in range(1, len(runs) + 1):
        smallest, members, best = sizes[runs[j - 1][-1]], 0, None
        for i in range(j - 1, -1, -1):
            largest = sizes[runs[i][0]]
            if largest > spread * smallest or (
                    i < j - 1 and (members + len(runs[i])) * largest > max_rows):
                break
            members += len(runs[i])
            candidate = (cost[i][0] + 1, cost[i][1] + members * largest)
            if best is None or _cheaper(candidate, best[0], pass_rows):
                best = (candidate, i)
        assert best is not None  # the run alone: within spread (>= RUN_SPREAD) and max_rows
        cost.append(best[0])
        start.append(best[1])
    groups: list[list[int]] = []
    j = len(runs)
    while j:
        groups.append([k for run in runs[start[j]:j] for k in run])
        j = start[j]
    return groups[::-1]


def _cheaper(a: tuple[int, float], b: tuple[int, float], pass_rows: float) -> bool:
    """Whether grouping cost ``a`` (groups, padded rows) is below ``b``."""
    if math.isinf(pass_rows):
        return a < b
    return a[0] * pass_rows + a[1] < b[0] * pass_rows + b[1]


def group_rows(trainer: Trainer, data: PreparedClient) -> float:
    """The most padded rows a group of clients like ``data`` may hold on the trainer's device:
    the plan's ``group_bytes`` over a row's widest activation (the input features where they
    are dense, else the widest layer output)."""
    x = _features(data)
    widths = [p.size(0) for p in trainer.model.parameters() if p.dim() >= 2]
    if not is_csr(x):
        widths.append(x.size(-1))
    return plans.for_device(trainer.device).group_bytes / (max(widths) * x.element_size())


def _features(data: PreparedClient) -> Tensor:
    if isinstance(data, PreparedNodeClient):
        return data.x
    if isinstance(data, PreparedEdgeClient):
        x: Tensor = data.graphs["train"].x
        return x
    return data.splits["train"].x


def row_macs(model: nn.Module, x: Tensor) -> float:
    """Multiply-adds a padded row costs a forward pass, roughly: the sizes of the model's
    weight matrices, those that read the input features scaled by the features' density where
    they are CSR (a sparse product skips the zeros)."""
    width = x.size(-1)
    density = x.values().numel() / max(x.size(0) * width, 1) if is_csr(x) else 1.0
    return float(sum(p.numel() * (density if p.size(-1) == width else 1.0)
                     for p in model.parameters() if p.dim() >= 2)) or 1.0


def by_size_group(trainer: Trainer, clients: list[PreparedClient], sizes: list[float],
                  cache: Cache | None, run: Callable[[list[int], Cache | None], list[R]]
                  ) -> list[R]:
    """``run(members, group_cache)`` for each group of ``size_groups`` over ``sizes`` (the
    clients' rows a padded pass), as the device's plan weighs padding against passes; its
    results put back in the order of ``sizes``. ``cache`` keeps one sub-cache per group."""
    plan = plans.for_device(trainer.device)
    pass_rows = plan.pass_macs / row_macs(trainer.model, _features(clients[0]))
    groups = size_groups(sizes, plan.size_spread, pass_rows, group_rows(trainer, clients[0]))
    if cache is not None:
        for stale in [g for g in cache if not isinstance(g, int) or g >= len(groups)]:
            del cache[stale]
    results: list[R | None] = [None] * len(sizes)
    for g, members in enumerate(groups):
        group_cache = None if cache is None else cache.setdefault(g, {})
        for k, result in zip(members, run(members, group_cache), strict=True):
            results[k] = result
    return cast(list[R], results)  # the groups cover every position
