"""What a paper's list of tables and figures is made of: its items, their statuses and the
committed rows behind them."""

from __future__ import annotations

from dataclasses import dataclass

REPRODUCED = "reproduced"
PARTLY = "partly reproduced"
NOT_REPRODUCED = "run, not reproduced"
NOT_RUN = "not run"
NO_EXPERIMENT = "not an experiment"
STATUSES = (REPRODUCED, PARTLY, NOT_REPRODUCED, NOT_RUN, NO_EXPERIMENT)

NOT_STAGEABLE = "dataset not stageable: no copy of {} fits the offline store's size limit or " \
                "was found (shared/datasets/README.md)"


@dataclass(frozen=True)
class Ref:
    """One committed number: a row of ``docs/results/<folder>/table.csv``. ``paper_of``: the
    metric of the row whose paper number stands beside it (a ``*_final`` row has none)."""

    folder: str
    method: str
    dataset: str
    metric: str
    label: str
    paper_of: str = ""


@dataclass(frozen=True)
class Item:
    """A table or figure of a paper (or part of one), its status and what stands behind it."""

    name: str
    what: str
    status: str
    note: str
    refs: tuple[Ref, ...] = ()
    folders: tuple[str, ...] = ()  # further committed result folders behind the item

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"{self.name}: unknown status {self.status!r}")

    @property
    def result_folders(self) -> tuple[str, ...]:
        """The committed result folders behind the item, those of its numbers first."""
        return tuple(dict.fromkeys([*(r.folder for r in self.refs), *self.folders]))


@dataclass(frozen=True)
class Paper:
    """A paper: its page (``docs/results/<key>.md``), how many tables and figures it prints
    (``roman``: its tables are numbered I, II, ...), its items and the README's headline.
    ``place``: its row on the status pages (the papers in the order they joined, so a new one
    adds a row at the end instead of reordering the pages)."""

    key: str
    title: str
    place: int
    tables: int
    figures: int
    items: tuple[Item, ...]
    summary_note: str
    summary: tuple[Ref, ...]
    roman: bool = False


def diagram(name: str, what: str) -> Item:
    """A figure that draws an idea, not a result."""
    return Item(name, what, NO_EXPERIMENT, "nothing to run")


def statistics(name: str, what: str = "dataset statistics") -> Item:
    """A table describing the datasets, not a result."""
    return Item(name, what, NO_EXPERIMENT,
                "the datasets' statistics, not a result (`graphfed datasets` describes the "
                "staged copies)")
