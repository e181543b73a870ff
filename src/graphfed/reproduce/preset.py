"""What a reproduction preset is: the paper's protocol, the table's rows, and its numbers."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


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
    reference: str = "self-train"  # the run fairness is measured against
    groups: dict[str, list[int]] = field(default_factory=dict)  # quality group -> clients
    figures: list[Callable[[list[dict], Path], Path]] = field(default_factory=list)
    notes: str = ""


REGISTRY: dict[str, Preset] = {}


def register(preset: Preset) -> Preset:
    REGISTRY[preset.name] = preset
    return preset
