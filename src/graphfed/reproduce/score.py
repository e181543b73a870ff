"""Turn a (method, setting)'s finished runs into its table rows.

Every metric a table reports is a registered ``Metric``: how its per-seed values are read from
the cells' runs, and the decimals a table shows it with. The kinds several papers share (a
per-round key at the selected round, the worst client's value, a server record, wall time) are
here; a paper's own kinds (payoffs, gradient fairness, upload MiB) live in its preset module.
Each paper module registers every metric its presets name (``register_metrics``), so a new
paper adds a module and edits nothing here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from graphfed.errors import GraphfedError
from graphfed.metrics import mean_std, t_interval
from graphfed.reproduce.plan import Cell
from graphfed.reproduce.preset import Preset, Variant
from graphfed.reproduce.selection import evaluated, selected_round
from graphfed.serialization import read_json, read_metrics

WHOLE_RUN = "run"  # the select value of a number over the whole run (payoffs, bytes, minutes)

# a metric's per-seed values (None: a seed does not record it) and the select value of its row
Reading = tuple[list[float] | None, str]


@dataclass
class Scoring:
    """What the rows of one reproduction share besides their own cells."""

    preset: Preset
    seeds: list[int]  # the seeds asked for (a row computed without training has no runs)
    rule: str = "final"  # the selector of a per-round metric without a rule of its own
    fairness_on: str = "local"  # the test sets behind gradient fairness: local or global
    # (setting, fold) -> the run of the preset's ``reference`` method there
    references: dict[tuple[str, int | None], Cell] = field(default_factory=dict)
    vectors: dict[str, dict] = field(default_factory=dict)  # what vectors.json shows


@dataclass(frozen=True, kw_only=True)
class Metric:
    """A table metric. This base reads nothing from runs: it is a number a computed preset
    supplies itself (``Preset.computed``), shown with ``decimals``."""

    decimals: int = 3
    better: str | None = None  # "higher" or "lower": which way a table marks the best row

    def direction(self) -> str | None:
        """Which way is better (None: a table marks no best row for this metric)."""
        return self.better

    def read(self, cells: list[Cell], scoring: Scoring) -> Reading | None:
        """The values over every seed of ``cells`` (one cell per fold; none for a setting that
        could not run); None for no row at all, not even the paper's number."""
        raise GraphfedError(f"{self} is a number its preset computes (Preset.computed); no "
                            "run records it")


METRICS: dict[str, Metric] = {}


def register_metrics(metrics: dict[str, Metric]) -> tuple[str, ...]:
    """Register each named metric; their names, for a preset's ``metrics``. A name registered
    again must mean the same (two papers may share one)."""
    for name, metric in metrics.items():
        known = METRICS.setdefault(name, metric)
        if known != metric:
            raise GraphfedError(f"metric {name} registered as {known} and as {metric}")
    return tuple(metrics)


def metric_kind(name: str) -> Metric:
    if name not in METRICS:
        raise GraphfedError(f"no paper module registers the metric {name}")
    return METRICS[name]


def seed_lines(cell: Cell, seed: int) -> list[dict]:
    return read_metrics(cell.run_dir / f"seed-{seed}" / "metrics.jsonl")


def seed_round(cell: Cell, seed: int, key: str, rule: str) -> dict:
    """The evaluated round of one seed of ``cell`` that ``rule`` reports ``key`` from."""
    return selected_round(rule, evaluated(seed_lines(cell, seed)), key)


def each_seed(cells: list[Cell], value: Callable[[Cell, int], float | None]
              ) -> list[float] | None:
    """``value`` of every seed of ``cells``; None when a seed has none (the method does not
    record it)."""
    values = [value(cell, seed) for cell in cells for seed in cell.seeds]
    return None if None in values else values


@dataclass(frozen=True)
class RoundValue(Metric):
    """A ``metrics.jsonl`` key at the round the table's selector picks, or at the round of the
    metric's own ``rule`` (FedSpray's pooled accuracies are, by definition, those of the round
    of lowest pooled validation loss)."""

    key: str
    rule: str | None = None

    def direction(self) -> str | None:
        """As declared, else read off the key: accuracies, F1 and AUC up, losses down."""
        if self.better:
            return self.better
        stem = self.key.removesuffix("_pooled").rsplit("_", 1)[-1]
        return {"acc": "higher", "f1": "higher", "auc": "higher", "loss": "lower"}.get(stem)

    def read(self, cells: list[Cell], scoring: Scoring) -> Reading:
        rule = self.rule or scoring.rule

        def value(cell: Cell, seed: int) -> float | None:
            rounds = evaluated(seed_lines(cell, seed))
            if not any(self.key in r for r in rounds):
                return None  # a task that does not record it (ROC-AUC on a multi-class set)
            return selected_round(rule, rounds, self.key).get(self.key)

        return each_seed(cells, value), rule


@dataclass(frozen=True)
class WorstClient(Metric):
    """The largest per-client ``key`` in the selected round (the worst client's loss: the
    measure AFL minimises, q-FFL's limit); NaN if any client's is NaN (a diverged client is the
    worst)."""

    key: str

    def read(self, cells: list[Cell], scoring: Scoring) -> Reading:
        def worst(cell: Cell, seed: int) -> float | None:
            line = seed_round(cell, seed, self.key, scoring.rule)
            values = [c[self.key] for c in line.get("clients", []) if self.key in c]
            if not values:
                return None
            return float("nan") if any(math.isnan(v) for v in values) else max(values)

        return each_seed(cells, worst), scoring.rule


@dataclass(frozen=True)
class ServerRecord(Metric):
    """A number the server records each round, from the last round that has it."""

    key: str

    def read(self, cells: list[Cell], scoring: Scoring) -> Reading:
        def last(cell: Cell, seed: int) -> float | None:
            values = [line["server"][self.key] for line in seed_lines(cell, seed)
                      if self.key in line.get("server", {})]
            return values[-1] if values else None

        return each_seed(cells, last), "final"


@dataclass(frozen=True)
class SummaryValue(Metric):
    """A number of a seed's ``summary.json``, at ``path`` (the privacy ledger's total ε:
    ``("privacy", "epsilon")``); a whole-run number, not a round's."""

    path: tuple[str, ...]

    def read(self, cells: list[Cell], scoring: Scoring) -> Reading:
        def recorded(cell: Cell, seed: int) -> float | None:
            value = read_json(cell.run_dir / f"seed-{seed}" / "summary.json", "seed summary",
                              ())
            for key in self.path:
                value = value.get(key) if isinstance(value, dict) else None
            return None if value is None else float(value)

        return each_seed(cells, recorded), WHOLE_RUN


@dataclass(frozen=True)
class WallTime(Metric):
    """A seed's training time: minutes, or seconds per round."""

    per_round: bool = False

    def read(self, cells: list[Cell], scoring: Scoring) -> Reading:
        def took(cell: Cell, seed: int) -> float:
            summary = read_json(cell.run_dir / f"seed-{seed}" / "summary.json", "seed summary",
                                ("seconds", "rounds"))
            return summary["seconds"] / (summary["rounds"] if self.per_round else 60)

        return each_seed(cells, took), WHOLE_RUN


def cell_rows(scoring: Scoring, variant: Variant, dataset: str, cells: list[Cell]
              ) -> list[dict]:
    """The rows of one (method, setting) over its ``cells`` (one per fold; none for a setting
    that could not run, which keeps only the paper's numbers)."""
    rows = []
    for name in scoring.preset.metrics:
        reading = metric_kind(name).read(cells, scoring)
        paper = scoring.preset.paper.get((variant.method, dataset, name), "")
        if reading is None or not (reading[0] or paper):
            continue
        values, select = reading
        finite = [v for v in values or [] if not math.isnan(v)]
        mean, std = mean_std(finite) if finite else (None, None)
        ci_low, ci_high = t_interval(finite) or (None, None)
        rows.append({"method": variant.method, "dataset": dataset, "metric": name,
                     "ours_mean": mean, "ours_std": std, "ci_low": ci_low, "ci_high": ci_high,
                     "n_seeds": len(finite), "paper": paper, "select": select,
                     "nan_seeds": len(values or []) - len(finite)})
    return rows
