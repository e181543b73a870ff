"""Sweep presets: one protocol swept on several datasets, a sweep folder per (dataset, protocol),
with every method of the registry that can run it.

A preset names no method: its line-up is every registered algorithm of its level whose config
the protocol's settings pass (``Algorithm.levels``, then the config's own checks, which run each
algorithm's ``check``). A method the checks refuse is left out with its one-line reason, which
the sweep records, so a method registered tomorrow joins the next sweep without an edit here.

``fgl-standard`` is FED-PUB's disjoint Metis protocol (``reproduce.papers.fedpub``) with 10
clients, its base settings and per-method settings, on the staged datasets CPU can afford: Cora,
CiteSeer, Amazon-Photo (FED-PUB's Amazon schedule) and the two multi-class heterophilous sets of
``reproduce.papers.heterophily`` (Chameleon and Squirrel, filtered; the binary Minesweeper and
Tolokers are scored by ROC-AUC, which the sweep's accuracy objective does not select on). The
partition is drawn once per dataset with FED-PUB's generator seed, so that a table has one
partition and one heterogeneity card; the seeds vary training only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from graphfed.algorithms.registry import get_algorithm, load_all
from graphfed.config import ConfigError, load_config
from graphfed.config_file import precheck
from graphfed.errors import GraphfedError
from graphfed.reproduce.papers import fedpub, heterophily
from graphfed.sweep.objective import DEFAULT_OBJECTIVE, method_config
from graphfed.sweep.runner import Request


@dataclass(frozen=True)
class Lineup:
    """The methods a preset runs on one dataset, and those it leaves out with the reason."""

    methods: tuple[str, ...]
    skipped: Mapping[str, str]


@dataclass(frozen=True)
class SweepPreset:
    """A protocol (``base``: config overrides) swept on ``datasets`` with every method of
    ``level`` that passes its config checks; ``budget`` trials a method, the winner over
    ``seeds`` seeds, unless the command says otherwise."""

    name: str
    description: str
    protocol: str  # the protocol's short name, in each sweep folder's name and the tables
    level: str
    base: tuple[str, ...]
    datasets: tuple[str, ...]
    budget: int
    seeds: int
    objective: str = DEFAULT_OBJECTIVE
    dataset_overrides: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # the settings a method takes under this protocol beyond the base (registry name -> overrides)
    method_overrides: Callable[[str], tuple[str, ...]] = lambda _: ()
    cost: str = ""  # what a run costs, measured: shown for the cells a leaderboard lacks

    def overrides(self, dataset: str) -> tuple[str, ...]:
        """The config overrides of ``dataset``'s sweep (before the command's own)."""
        return (*self.base, f"dataset={dataset}", *self.dataset_overrides.get(dataset, ()))

    def folder(self, dataset: str) -> str:
        """The sweep folder of ``dataset`` under the preset's ``--out``."""
        return f"{dataset}-{self.protocol}"

    def lineup(self, dataset: str, extra: tuple[str, ...] = ()) -> Lineup:
        """Every registered method of the preset's level whose config on ``dataset`` (with the
        command's ``extra`` overrides) passes the checks, by name; the others with why not."""
        base = load_config(None, (*self.overrides(dataset), *extra))
        methods: list[str] = []
        skipped: dict[str, str] = {}
        for name, algorithm in sorted(load_all().items()):
            if self.level not in algorithm.levels:
                continue
            try:
                method_config(base, name, self.method_overrides(name))
            except ConfigError as e:
                skipped[name] = " ".join(str(e).split())
            else:
                methods.append(name)
        return Lineup(tuple(methods), skipped)


FEDPUB_K10 = "fedpub_disjoint-K10"
FGL_STANDARD = SweepPreset(
    name="fgl-standard",
    description="FED-PUB's disjoint Metis protocol, 10 clients, every node-level method that "
                "can run it, on Cora, CiteSeer, Amazon-Photo, Chameleon- and Squirrel-filtered",
    protocol=FEDPUB_K10,
    level="node",
    base=(*fedpub.PROTOCOL, *heterophily.ONE_PARTITION, "num_clients=10"),
    datasets=("Cora", "CiteSeer", "Amazon-Photo", "Chameleon-filtered", "Squirrel-filtered"),
    budget=12, seeds=3,
    dataset_overrides={"Amazon-Photo": tuple(fedpub.AMAZON)},
    method_overrides=fedpub.overrides,
    cost="a 100-round Cora run of fedavg at one local epoch takes about 17 s on a free CPU "
         "core (11 s of it training); the shared space's 3 and 5 local epochs multiply the "
         "training part. A method costs budget + seeds - 1 runs a dataset (14 at the "
         "preset's 12 and 3), so every method on one Cora-sized dataset is several hundred "
         "runs, CPU-hours on 2 cores; Amazon-Photo (200 rounds x 2 epochs on a graph 2.8x "
         "Cora's nodes) several times a Cora cell")

PRESETS: dict[str, SweepPreset] = {p.name: p for p in (FGL_STANDARD,)}


def get_preset(name: str) -> SweepPreset:
    if name not in PRESETS:
        raise GraphfedError(f"unknown sweep preset {name!r}; available: {', '.join(PRESETS)}")
    return PRESETS[name]


def chosen(preset: SweepPreset, datasets: list[str] | None) -> list[str]:
    """The preset's datasets a command asked for (all by default), refusing others."""
    unknown = [d for d in datasets or () if d not in preset.datasets]
    if unknown:
        raise GraphfedError(f"preset {preset.name} has no dataset(s) {', '.join(unknown)}; "
                            f"available: {', '.join(preset.datasets)}")
    return list(datasets or preset.datasets)


def pick(lineup: Lineup, preset: SweepPreset, dataset: str, methods: list[str] | None
         ) -> tuple[str, ...]:
    """The methods of ``lineup`` a command asked for (all by default, in registry names):
    one the preset leaves out is refused with its reason."""
    if not methods:
        return lineup.methods
    names = [get_algorithm(m).name for m in methods]
    for name in names:
        if name in lineup.skipped:
            raise GraphfedError(f"preset {preset.name} leaves {name} out on {dataset}: "
                                f"{lineup.skipped[name]}")
        if name not in lineup.methods:
            raise GraphfedError(f"{name} is not a {preset.level}-level method; preset "
                                f"{preset.name} runs {', '.join(lineup.methods)}")
    return tuple(names)


@dataclass(frozen=True)
class Planned:
    """One sweep of a preset: its request, its folder under ``--out``, and what its
    ``sweep.json`` adds (the preset, the protocol, the methods left out and why)."""

    request: Request
    folder: str
    context: dict[str, Any]


def plan(preset: SweepPreset, request: Request, datasets: list[str] | None) -> list[Planned]:
    """The sweep of each chosen dataset, with ``request``'s options, its methods (a subset of
    the preset's, all by default) and its overrides after the preset's; every input is checked,
    and every line-up derived, before the first trial trains."""
    if request.config is not None:
        raise GraphfedError(f"--preset {preset.name} states its own config: give KEY=VALUE "
                            f"overrides only, not {request.config}")
    names = chosen(preset, datasets)
    if request.storage is not None and len(names) > 1:
        raise GraphfedError("--storage names one study store, but --preset sweeps several "
                            "datasets (one study per method each): choose one with --datasets, "
                            "or leave --storage out")
    planned = []
    for dataset in names:
        overrides = (*preset.overrides(dataset), *request.overrides)
        precheck(None, list(overrides))
        lineup = preset.lineup(dataset, request.overrides)
        methods = pick(lineup, preset, dataset, list(request.methods))
        one = replace(request, overrides=overrides, methods=methods, method_overrides=tuple(
            (m, preset.method_overrides(m)) for m in methods))
        one.check()
        planned.append(Planned(one, preset.folder(dataset), {
            "preset": preset.name, "protocol": preset.protocol,
            "skipped": dict(lineup.skipped)}))
    return planned
