"""Run a sweep: every method's study to its budget, then each winner over the seeds.

Every input is checked, and every study opened, before anything trains. Trials and final seeds
are ``reproduce`` cells (``reproduce.execute.run_cells``): a finished run directory of the same
config is reused, an interrupted one resumed, and ``jobs > 1`` trains them in that many worker
processes. SIGINT or SIGTERM stops it all (``Interrupted``); the same call continues.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphfed.algorithms.registry import get_algorithm
from graphfed.config import ConfigError, ExperimentConfig, build_config, load_config
from graphfed.errors import GraphfedError
from graphfed.reproduce.execute import interruptible, run_cells
from graphfed.reproduce.plan import KEPT_ACROSS, Cell
from graphfed.reproduce.preset import Variant
from graphfed.serialization import read_metrics
from graphfed.sweep import report
from graphfed.sweep.objective import (
    OBJECTIVES,
    TRIAL_SEED,
    Objective,
    method_config,
    trial_config,
)
from graphfed.sweep.space import GRID_SEED, describe, method_space
from graphfed.sweep.study import SAMPLERS, SLOT, MethodStudy, require_optuna


@dataclass(frozen=True)
class Request:
    """What a sweep was asked for."""

    config: str | None  # the config file (None: every key at its default)
    overrides: tuple[str, ...]
    methods: tuple[str, ...]
    budget: int
    seeds: int
    sampler: str = "grid"
    objective: str = "val_acc"
    jobs: int = 1
    storage: str | None = None  # default: sqlite:///OUT/study.db
    ray: str | None = None  # a Ray cluster's address: every run a task there instead
    # (method, key=value overrides) for the methods a protocol sets up its own way (a preset's)
    method_overrides: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def check(self) -> None:
        """Refuse bad numbers and names before anything loads."""
        if not self.methods:
            raise GraphfedError("--methods names no method, e.g. --methods fedavg,fedprox")
        for flag, value in (("--budget", self.budget), ("--seeds", self.seeds),
                            ("--jobs", self.jobs)):
            if value < 1:
                raise GraphfedError(f"{flag} must be at least 1, got {value}")
        if self.sampler not in SAMPLERS:
            raise GraphfedError(f"unknown sampler {self.sampler!r}; choose one of: "
                                f"{', '.join(SAMPLERS)}")
        if self.objective not in OBJECTIVES:
            raise GraphfedError(f"unknown objective {self.objective!r}; choose one of: "
                                f"{', '.join(OBJECTIVES)}")


def sweep(request: Request, out: Path, progress: bool = True,
          context: Mapping[str, Any] | None = None) -> list[dict]:
    """Run ``request`` into ``out``; the table's rows. ``context`` (e.g. the preset and
    protocol it came from) joins what ``sweep.json`` records."""
    request.check()
    require_optuna()
    methods = [get_algorithm(m).name for m in request.methods]
    if len(set(methods)) != len(methods):
        raise GraphfedError(f"--methods names a method twice: {','.join(request.methods)}")
    objective = OBJECTIVES[request.objective]
    base = load_config(request.config, request.overrides)
    extra = dict(request.method_overrides)
    configs = {m: method_config(base, m, extra.get(m, ())) for m in methods}
    out.mkdir(parents=True, exist_ok=True)
    if request.ray:  # before any study opens: a cluster that does not answer costs nothing
        from graphfed.reproduce.ray_cluster import connect

        connect(request.ray)
    storage = request.storage or f"sqlite:///{out.resolve() / 'study.db'}"
    studies = [_open(m, configs[m], request, objective, storage) for m in methods]
    seeds = list(range(request.seeds))
    with interruptible(out):
        _search(studies, configs, objective, out / "trials", request, progress)
        finals = [(study, _cell(configs[study.method], study.method,
                                dict(study.best().params), study.method, seeds))
                  for study in studies]
        run_cells([cell for _, cell in finals], out / "final", progress, request.jobs,
                  request.ray)
        table = report.rows(finals, seeds, objective.rule)
        title = (f"sweep on {base.dataset}: {request.budget} trials per method "
                 f"({request.sampler} sampler, objective {objective.name}: {objective.help}), "
                 f"the winner over {request.seeds} seed{'s' * (request.seeds != 1)}, select "
                 f"{objective.rule}")
        report.write(out, table, finals, title)
        report.write_about(out, _about(request, base, objective, finals, out, context or {}))
    return table


def _about(request: Request, base: ExperimentConfig, objective: Objective,
           finals: list[tuple[MethodStudy, Cell]], out: Path, context: Mapping[str, Any]
           ) -> dict[str, Any]:
    """What ``sweep.json`` records: how the table was made (budget, sampler, the validation
    rule, the seeds, the protocol: partition and clients unless ``context`` names it), the
    partition's heterogeneity card (the first final run's: every method
    runs on the same partitions; one for every seed where ``partition.seed`` fixes it) and the
    seconds its runs trained."""
    first = finals[0][1].summary or {}
    runs = [out / "trials" / f"{study.method}-t{trial.user_attrs[SLOT]:03d}"
            for study, _ in finals for trial in study.finished()]
    seconds = [report.run_seconds(path) for path in runs] + [
        float((cell.summary or {}).get("seconds") or 0.0) for _, cell in finals]
    return {"dataset": base.dataset, "protocol": f"{base.partition.name}-K{base.num_clients}",
            "methods": [study.method for study, _ in finals],
            "budget": request.budget, "sampler": request.sampler,
            "grid_seed": GRID_SEED if request.sampler == "grid" else None,
            "objective": objective.name, "objective_help": objective.help,
            "rule": objective.rule, "trial_seed": TRIAL_SEED,
            "seeds": list(range(request.seeds)), "config": request.config,
            "overrides": list(request.overrides),
            "method_overrides": {m: list(o) for m, o in request.method_overrides},
            "partition_seed": base.partition.seed, "partition_id": first.get("partition_id"),
            "heterogeneity": first.get("heterogeneity"),
            "run_seconds": round(sum(seconds), 1), **context}


def _open(method: str, config: ExperimentConfig, request: Request, objective: Objective,
          storage: str) -> MethodStudy:
    space = method_space(get_algorithm(config.algorithm))
    made_for = {"search space": describe(space), "sampler": request.sampler,
                "objective": objective.name, "trial seed": TRIAL_SEED,
                "config": _searched(config.to_dict())}
    return MethodStudy.open(method, storage, space, request.sampler, request.budget,
                            objective.direction, made_for, _as_today)


def _searched(config: dict) -> dict:
    """The config a study's trials start from, but for what every trial sets itself."""
    return {k: v for k, v in config.items() if k not in (*KEPT_ACROSS, "name")}


def _as_today(made_for: dict) -> dict:
    """What a study recorded, its config resolved by this version (options added since take
    their defaults; one it refuses stays as recorded, and differs)."""
    try:
        config = build_config(made_for.get("config") or {}).to_dict()
    except ConfigError:
        return made_for
    return {**made_for, "config": _searched(config)}


def _search(studies: list[MethodStudy], configs: dict[str, ExperimentConfig],
            objective: Objective, runs: Path, request: Request, progress: bool) -> None:
    """Train and score every study's missing trials, all methods' in one batch: every
    missing trial at once on the grid, ``jobs`` a method at a time with TPE (which picks each
    batch from the trials told before it), in worker processes or on ``request.ray``."""
    jobs = request.jobs
    while pending := [study for study in studies if study.missing()]:
        batch = [(study, trial, slot) for study in pending for trial, slot in study.ask(
            len(study.missing()) if study.sampler == "grid" else jobs)]
        cells = [_cell(configs[study.method], study.method, dict(trial.params),
                       f"{study.method}-t{slot:03d}") for study, trial, slot in batch]
        run_cells(cells, runs, progress, jobs, request.ray)
        for (study, trial, slot), cell in zip(batch, cells, strict=True):
            assert cell.run_dir is not None
            value = objective.score(read_metrics(cell.run_dir / f"seed-{TRIAL_SEED}"
                                                 / "metrics.jsonl"))
            study.tell(trial, value)
            if progress:
                done = study.budget - len(study.missing())
                print(f"[{study.method} {done}/{study.budget}] slot {slot}: "
                      f"{objective.name} {value:.4f}", flush=True)


def _cell(config: ExperimentConfig, method: str, params: dict[str, Any], name: str,
          seeds: list[int] | None = None) -> Cell:
    """The run of ``method`` with a trial's values: the trial itself, or (``seeds``) the
    winner's final cell."""
    return Cell(Variant(method, config.algorithm), config.dataset,
                trial_config(config, params, name, seeds))
