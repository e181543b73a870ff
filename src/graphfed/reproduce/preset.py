"""What a reproduction preset is: the paper's protocol, the table's rows, and its numbers."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from graphfed.algorithms.registry import load_all
from graphfed.errors import GraphfedError

# a published table's columns: those of a reproduction's table.csv that the paper fills
PAPER_COLUMNS = ("method", "dataset", "metric", "paper")


@dataclass(frozen=True)
class Variant:
    """One row group of a table: a method id, the algorithm that runs it, its overrides.

    ``algorithm=None`` marks a row computed without training (e.g. a volume-based payoff)."""

    method: str
    algorithm: str | None
    overrides: tuple[str, ...] = ()


@dataclass
class Preset:
    name: str
    description: str
    variants: list[Variant]
    datasets: list[str]
    metrics: tuple[str, ...]
    base: list[str]  # the paper's protocol as config overrides
    seeds: int = 5
    quick: list[str] = field(default_factory=list)  # overrides of --quick
    quick_seeds: int = 2
    dataset_overrides: dict[str, list[str]] = field(default_factory=dict)
    cell_overrides: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # (method, ds)
    paper: dict[tuple[str, str, str], str] = field(default_factory=dict)  # (method, ds, metric)
    select: str = "final"  # the round each seed's number comes from (reproduce.selection)
    # the method fairness is measured against ("": none); it joins any selection of methods
    reference: str = ""
    groups: dict[str, list[int]] = field(default_factory=dict)  # quality group -> clients
    figures: list[Callable[[list[dict], Path], Path]] = field(default_factory=list)
    notes: str = ""
    # labels of ``datasets`` may carry settings (``NCI1/k=25``): component -> config key, or
    # -> {level: overrides} for named levels (``reproduce.settings``)
    setting_keys: dict[str, str | dict[str, tuple[str, ...]]] = field(default_factory=dict)
    # > 0: every (method, setting) runs once per fold (``partition.fold``), each with all seeds,
    # and its row is over the folds x seeds runs
    folds: int = 0
    report_missing: bool = False  # a setting that cannot run keeps its paper numbers (ours empty)
    # the dataset column as the written table shows it (the paper's names, a contract's form);
    # labels stay the internal setting labels everywhere else (paper lookup, run folders)
    table_label: Callable[[str], str] | None = None
    # a table computed without training (e.g. an attack simulation): seeds -> its rows
    # (method, dataset, metric, ours_mean, ours_std); every run-based field above is then unused
    computed: Callable[[int], list[dict]] | None = None
    # what the whole preset costs, where a results page measured or estimated it (shown as a
    # reproduction starts)
    cost: str = ""


def declared_methods(level: str, task: str, first: tuple[str, ...]) -> list[str]:
    """Every registered algorithm that declares ``level`` and ``task`` (``Algorithm.levels``,
    ``Algorithm.tasks``): those of ``first`` in its order, then the rest by name."""
    able = sorted(name for name, a in load_all().items()
                  if level in a.levels and task in a.tasks)
    return [*(m for m in first if m in able), *(m for m in able if m not in first)]


REGISTRY: dict[str, Preset] = {}


def register(preset: Preset) -> Preset:
    REGISTRY[preset.name] = preset
    return preset


def paper_numbers(paper: str, *tables: str) -> dict[tuple[str, str, str], str]:
    """The published numbers of ``tables``, each the package file ``tables/<paper>/<table>.csv``
    (columns ``PAPER_COLUMNS``), keyed by (method, dataset, metric) and kept as printed."""
    out: dict[tuple[str, str, str], str] = {}
    for table in tables:
        name = f"{paper}/{table}.csv"
        text = (files("graphfed.reproduce") / "tables" / paper / f"{table}.csv").read_text(
            encoding="utf-8")
        reader = csv.DictReader(io.StringIO(text))
        if tuple(reader.fieldnames or ()) != PAPER_COLUMNS:
            raise GraphfedError(f"{name}: columns {reader.fieldnames}, expected {PAPER_COLUMNS}")
        for row in reader:
            key = (row["method"], row["dataset"], row["metric"])
            if key in out:
                raise GraphfedError(f"{name}: {key} has two numbers")
            out[key] = row["paper"]
    return out
