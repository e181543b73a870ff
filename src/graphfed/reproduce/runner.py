"""Reproduce a preset: plan its cells (method x setting x fold, all seeds), run them, score the
runs and write ours beside the paper's numbers (``plan``, ``execute``, ``score``, ``write``).

A finished cell with the same config is reused and an interrupted one resumed, so a long
reproduction can be stopped (Ctrl-C, SIGTERM) and started again with the same command. A seed's
number is read from the evaluated round a selector picks (``reproduce.selection``), so finished
runs are reported under another rule without training. A table row pools every fold and seed of
its (method, setting).
"""

from __future__ import annotations

import json
from pathlib import Path

from graphfed.data.datasets import dataset_task
from graphfed.errors import GraphfedError
from graphfed.reproduce.catalog import get_preset
from graphfed.reproduce.execute import interruptible, run_cells
from graphfed.reproduce.plan import Cell, fold_axis, plan_cells, select
from graphfed.reproduce.preset import Preset, Variant
from graphfed.reproduce.score import (
    WHOLE_RUN,
    RoundValue,
    Scoring,
    WorstClient,
    cell_rows,
    metric_kind,
)
from graphfed.reproduce.selection import SELECTORS, check_selector, check_task
from graphfed.reproduce.settings import missing, parse_label
from graphfed.reproduce.write import publish, scope


def reproduce(name: str, methods: list[str] | None = None, datasets: list[str] | None = None,
              seeds: int | None = None, quick: bool = False, out: Path | None = None,
              progress: bool = True, fairness_on: str = "local",
              overrides: tuple[str, ...] = (), selector: str | None = None, jobs: int = 1,
              settings: list[str] | None = None, folds: int | None = None,
              ray_address: str | None = None) -> tuple[Path, list[dict], list[str]]:
    """Run preset ``name``; returns the output directory, the table rows and what was skipped.

    ``fairness_on``: the test set behind model-gradient fairness, each agent's local one
    (the spec's recommendation) or the global one (every agent's model is then also evaluated
    there). ``selector``: the rule picking each seed's round (default: the preset's).
    ``jobs``: cells run in that many worker processes at once; ``ray_address``: each seed a
    task on that Ray cluster instead (``ray_cluster``). ``settings``: ``key=value``
    filters of the setting labels. ``folds``: run folds ``0 .. folds-1`` of a preset with a
    fold axis (``seeds`` are then each fold's repeats).

    SIGINT or SIGTERM stops it all (the workers too) and raises ``Interrupted``: what finished
    stays in ``out``, from where the same call continues."""
    if jobs < 1:
        raise GraphfedError(f"--jobs must be at least 1, got {jobs}")
    if ray_address:  # before any planning: a cluster that does not answer costs nothing
        from graphfed.reproduce.ray_cluster import connect

        connect(ray_address)
    if fairness_on not in ("local", "global"):
        raise GraphfedError(f"fairness is measured on 'local' or 'global' test sets, not "
                            f"'{fairness_on}'")
    preset = get_preset(name)
    out = Path(out or Path("runs") / f"reproduce-{name}{'-quick' if quick else ''}")
    count = seeds or (preset.quick_seeds if quick else preset.seeds)
    with interruptible(out):
        if preset.computed is not None:
            return _computed(preset, count, out)
        rule = check_selector(selector or preset.select)
        variants, wanted = select(preset, methods, datasets, settings)
        fold_list = fold_axis(preset, folds)
        seed_list = list(range(count))
        reasons = {label: missing(parse_label(label, preset.setting_keys).dataset)
                   for label in wanted}
        _check_tasks(preset, rule, [w for w in wanted if reasons[w] is None])
        cells = plan_cells(preset, variants, [w for w in wanted if reasons[w] is None],
                           seed_list, fold_list, quick, fairness_on, overrides)
        runs = out / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        if progress and preset.cost:
            print(f"{name} in full: {preset.cost}", flush=True)
        run_cells([c for c in cells if c.variant.algorithm is not None], runs, progress, jobs,
                  ray_address)
        scoring = Scoring(preset, seed_list, rule, fairness_on, references={
            (c.dataset, c.fold): c for c in cells if c.variant.method == preset.reference})
        rows = _rows(scoring, variants, [w for w in wanted
                                         if reasons[w] is None or preset.report_missing], cells)
        (out / "vectors.json").write_text(json.dumps(scoring.vectors, indent=1))
        title = f"{name}: {preset.description} ({scope(count, fold_list, quick, overrides)}; " \
                f"select {rule}: {SELECTORS[rule]})"
        publish(preset, rows, out, title, rule,
                [c.config.engine for c in cells if c.config is not None])
    return out, rows, list(dict.fromkeys(r for r in reasons.values() if r is not None))


def _check_tasks(preset: Preset, rule: str, labels: list[str]) -> None:
    """Refuse, before anything trains, a rule or per-round metric the task of a setting's
    dataset does not record (``selection.check_task``)."""
    keys = [metric.key for metric in map(metric_kind, preset.metrics)
            if isinstance(metric, RoundValue | WorstClient)]
    for dataset in dict.fromkeys(parse_label(label, preset.setting_keys).dataset
                                 for label in labels):
        check_task(rule, keys, dataset_task(dataset), dataset)


def _rows(scoring: Scoring, variants: list[Variant], labels: list[str], cells: list[Cell]
          ) -> list[dict]:
    """Every (setting, method)'s rows over its cells, the dataset column as the table shows
    it."""
    rows = [row for label in labels for variant in variants for row in cell_rows(
        scoring, variant, label, [c for c in cells if c.dataset == label and c.variant is variant])]
    shown = scoring.preset.table_label
    return rows if shown is None else [{**row, "dataset": shown(row["dataset"])} for row in rows]


def _computed(preset: Preset, seeds: int, out: Path) -> tuple[Path, list[dict], list[str]]:
    """A preset computed without training: its rows beside the paper's numbers."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [{**row, "paper": preset.paper.get((row["method"], row["dataset"], row["metric"]), ""),
             "select": WHOLE_RUN} for row in preset.computed(seeds)]
    title = f"{preset.name}: {preset.description} ({seeds} seed{'s' if seeds != 1 else ''})"
    publish(preset, rows, out, title, WHOLE_RUN, [])
    return out, rows, []
