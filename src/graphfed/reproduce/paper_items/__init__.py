"""Every table and figure of each reproduced paper, and where graphfed stands on each.

A declarative list read by ``graphfed.reproduce.status``, which renders it into each paper's
results page, ``docs/results/status.md`` and the README. An item's measured numbers are never
written here: an item names the committed rows (``Ref``: result folder, method, dataset, metric)
and the generator reads them, with their selection rule, from ``docs/results/<folder>/table.csv``.
What no table holds (why an item was not run, what a run found) is the item's ``note``, in words.

One module per paper here defines its ``PAPER``; ``PAPERS`` finds them by discovery, so a new
paper is a new module with no list to edit.
"""

from __future__ import annotations

import importlib
import pkgutil

from graphfed.reproduce.paper_items.model import (
    NO_EXPERIMENT,
    NOT_REPRODUCED,
    NOT_RUN,
    NOT_STAGEABLE,
    PARTLY,
    REPRODUCED,
    STATUSES,
    Item,
    Paper,
    Ref,
)


def _discover() -> tuple[Paper, ...]:
    """The ``PAPER`` of every module of this package, in their ``place`` on the pages."""
    papers = []
    for module in pkgutil.iter_modules(__path__):
        paper = getattr(importlib.import_module(f"{__name__}.{module.name}"), "PAPER", None)
        if isinstance(paper, Paper):
            papers.append(paper)
    return tuple(sorted(papers, key=lambda p: (p.place, p.key)))


PAPERS = _discover()

__all__ = ["NOT_REPRODUCED", "NOT_RUN", "NOT_STAGEABLE", "NO_EXPERIMENT", "PAPERS", "PARTLY",
           "REPRODUCED", "STATUSES", "Item", "Paper", "Ref"]
