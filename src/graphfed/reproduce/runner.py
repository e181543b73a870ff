"""Run a preset's cells (method x dataset, all seeds), then write ours beside the paper's numbers.

Each cell is an ordinary run directory under ``OUT/runs/<method>-<dataset>``; a finished cell with
the same config is reused and an interrupted one resumed, so a long reproduction can be stopped and
started again with the same command. A seed's number is read from the evaluated round a selector
picks (``reproduce.selection``), so finished runs are reported under another rule without training.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import shutil
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import torch

from graphfed.build import federated_data
from graphfed.config import ConfigError, ExperimentConfig, load_config
from graphfed.data.datasets import canonical_name, is_present
from graphfed.errors import GraphfedError
from graphfed.launch import resume, run
from graphfed.mechanisms.payoff import PAYOFF_BASELINES
from graphfed.metrics import mean_std, pearson
from graphfed.reproduce.catalog import get_preset
from graphfed.reproduce.preset import Preset, Variant
from graphfed.reproduce.selection import SELECTORS, check_selector, evaluated, selected_round
from graphfed.serialization import read_json, read_metrics

COLUMNS = ("method", "dataset", "metric", "ours_mean", "ours_std", "paper", "select")
WHOLE_RUN = "run"  # the select value of a number over the whole run (payoffs, bytes, minutes)


@dataclass
class Cell:
    variant: Variant
    dataset: str
    config: ExperimentConfig | None
    run_dir: Path | None = None
    summary: dict | None = None


def select(preset: Preset, methods: list[str] | None, datasets: list[str] | None
           ) -> tuple[list[Variant], list[str]]:
    """The variants and datasets to run; the fairness reference joins whenever it is needed."""
    known = {v.method: v for v in preset.variants}
    if methods:
        unknown = [m for m in methods if m not in known]
        if unknown:
            raise GraphfedError(f"preset {preset.name} has no method(s) {unknown}; "
                                f"available: {', '.join(known)}")
        chosen = [known[m] for m in methods]
    else:
        chosen = list(preset.variants)
    if "gradient_fairness" in preset.metrics and preset.reference in known \
            and known[preset.reference] not in chosen:
        chosen.insert(0, known[preset.reference])
    wanted = [canonical_name(d) for d in datasets] if datasets else preset.datasets
    unknown = [d for d in wanted if d not in preset.datasets]
    if unknown:
        raise GraphfedError(f"preset {preset.name} covers {', '.join(preset.datasets)}, "
                            f"not {unknown}")
    return chosen, wanted


def cell_config(preset: Preset, variant: Variant, dataset: str, seeds: list[int],
                quick: bool, fairness_on: str = "local", overrides: tuple[str, ...] = ()
                ) -> ExperimentConfig:
    """The cell's config: the paper's protocol, the dataset's and the row's settings, then
    ``--quick`` and the caller's own ``overrides`` (e.g. fewer rounds), which win."""
    extra = ["client_global_eval=true"] if fairness_on == "global" else []
    settings = [*preset.base, *extra, f"dataset={dataset}",
                 *preset.dataset_overrides.get(dataset, []),
                 f"algorithm={variant.algorithm or 'local'}", *variant.overrides,
                 *preset.cell_overrides.get((variant.method, dataset), []),
                 *(preset.quick if quick else []), *overrides, f"seeds={seeds}",
                 f"name={variant.method}-{dataset}"]
    return load_config(None, settings)


def run_cell(cell: Cell, runs: Path, progress: bool) -> None:
    """Reuse a finished run of this exact config, resume an interrupted one, or start it."""
    path = runs / cell.config.name
    same = (path / "config.yaml").is_file() and _saved_config(path) == cell.config.to_dict()
    if same and (path / "summary.json").is_file():
        cell.run_dir, cell.summary = path, read_json(path / "summary.json", "run summary")
    elif same:
        cell.run_dir, cell.summary = resume(path, progress=progress)
    else:
        if path.exists():
            shutil.rmtree(path)
        cell.run_dir, cell.summary = run(cell.config, runs, progress=progress)


def _run_in_worker(cell: Cell, runs: Path) -> tuple[Path, dict]:
    run_cell(cell, runs, progress=False)
    return cell.run_dir, cell.summary


def _share_cores(jobs: int) -> None:
    """A worker's torch threads: the machine's cores split between the workers."""
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // jobs))


def run_cells(cells: list[Cell], runs: Path, progress: bool, jobs: int) -> None:
    """Run (or reuse, or resume) every cell; with ``jobs > 1`` in that many worker processes,
    which share the machine's cores and its GPU. Each cell is its own run directory, so an
    interrupted preset resumes the same way whatever ``jobs`` was."""
    if jobs == 1 or len(cells) < 2:
        for cell in cells:
            run_cell(cell, runs, progress)
        return
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    with ProcessPoolExecutor(min(jobs, len(cells)), mp_context=context,
                             initializer=_share_cores, initargs=(jobs,)) as pool:
        futures = {pool.submit(_run_in_worker, cell, runs): cell for cell in cells}
        for done, future in enumerate(as_completed(futures), 1):
            cell = futures[future]
            cell.run_dir, cell.summary = future.result()
            if progress:
                print(f"[{done}/{len(cells)}] {cell.config.name} finished", flush=True)


def _saved_config(path: Path) -> dict | None:
    """A run's config as this version resolves it (new options take their defaults); None
    for one this version refuses or cannot read, whose cell then runs again."""
    try:
        return load_config(path / "config.yaml").to_dict()
    except ConfigError:
        return None


# ------------------------------------------------------------------ metrics

# a per-round metric of a table -> the metrics.jsonl key it reports
ROUND_KEYS = {"personalized_acc": "test_acc", "global_acc": "global_test_acc",
              "local_f1": "test_acc", "global_f1": "client_global_test_acc"}


def seed_round(cell: Cell, seed: int, key: str, rule: str) -> dict:
    """The evaluated round of one seed of ``cell`` that ``rule`` reports ``key`` from."""
    return selected_round(rule, evaluated(seed_lines(cell, seed)), key)


def fairness_vectors(reference: Cell, cell: Cell, on: str = "local",
                     rule: str = "final") -> dict[int, dict]:
    """Per seed: both per-agent accuracy vectors (on each agent's local test set, or on the
    global test set) and their Pearson correlation; each run's vector is from the round the
    rule picks for its client-mean accuracy on that test set."""
    key, mean_key = (("test_acc", "test_acc") if on == "local"
                     else ("global_acc", "client_global_test_acc"))
    out = {}
    for seed in cell.summary["seeds"]:
        alone = [c[key] for c in seed_round(reference, seed, mean_key, rule)["clients"]]
        together = [c[key] for c in seed_round(cell, seed, mean_key, rule)["clients"]]
        out[seed] = {"self_train": alone, "federated": together,
                     "pearson": pearson(alone, together)}
    return out


def group_payoffs(preset: Preset, cell: Cell, seeds: list[int]) -> dict[str, list[float]]:
    """Mean payoff per round per agent of each quality group, one value per seed."""
    out: dict[str, list[float]] = {g: [] for g in preset.groups}
    for seed in seeds:
        per_agent = _payoff_per_agent(cell, seed)
        for group, members in preset.groups.items():
            out[group].append(sum(per_agent[c] for c in members) / len(members))
    return out


def _payoff_per_agent(cell: Cell, seed: int) -> list[float]:
    if cell.variant.algorithm is None:  # a volume-based baseline: the same payoff every round
        data = federated_data(cell.config, seed)
        sizes = [c.num_samples("train") for c in data.clients]
        return PAYOFF_BASELINES[cell.variant.method](sizes, 1.0)
    lines = seed_lines(cell, seed)
    rounds = [line["server"]["payoff"] for line in lines
              if line["round"] > 0 and "payoff" in line.get("server", {})]
    if not rounds:
        raise GraphfedError(f"{cell.variant.method} records no payoff; it cannot fill a payoff "
                            "table")
    return [sum(r[c] for r in rounds) / len(rounds) for c in range(len(rounds[0]))]


def seed_lines(cell: Cell, seed: int) -> list[dict]:
    path = cell.run_dir / f"seed-{seed}" / "metrics.jsonl"
    return read_metrics(path)


MIB = 2**20


def run_metric(cell: Cell, seed: int, metric: str) -> float:
    """A per-seed number of the whole run: upload MiB or minutes."""
    if metric == "minutes":
        return read_json(cell.run_dir / f"seed-{seed}" / "summary.json", "seed summary",
                         ("seconds",))["seconds"] / 60
    lines = [line for line in seed_lines(cell, seed) if line["round"] > 0]
    ego = sum(line.get("server", {}).get("upload_ego_bytes", 0) for line in lines)
    return (ego if metric == "ego_mib" else sum(x["bytes_up"] for x in lines) - ego) / MIB


def cell_rows(preset: Preset, cell: Cell, reference: Cell | None, seeds: list[int],
              vectors: dict, fairness_on: str = "local", rule: str = "final") -> list[dict]:
    """The cell's table rows; a per-round metric is read, per seed, from the round ``rule``
    picks."""
    rows = []
    method, dataset = cell.variant.method, cell.dataset

    def add(metric: str, values: list[float] | None, select: str = rule) -> None:
        paper = preset.paper.get((method, dataset, metric), "")
        if not values and not paper:
            return
        mean, std = mean_std(values) if values else (None, None)
        rows.append({"method": method, "dataset": dataset, "metric": metric,
                     "ours_mean": mean, "ours_std": std, "paper": paper, "select": select})

    ran = cell.summary["seeds"] if cell.summary else []
    for metric in preset.metrics:
        if metric in ROUND_KEYS:
            key = ROUND_KEYS[metric]
            values = [seed_round(cell, s, key, rule).get(key) for s in ran]
            add(metric, None if None in values else values)
        elif metric == "gradient_fairness" and reference is not None and cell is not reference:
            pairs = fairness_vectors(reference, cell, fairness_on, rule)
            vectors[f"{method}/{dataset}"] = pairs
            add(metric, [p["pearson"] for p in pairs.values()])
        elif metric in ("ego_mib", "param_mib", "minutes"):
            add(metric, [run_metric(cell, s, metric) for s in ran], WHOLE_RUN)
        elif metric.startswith("payoff_"):
            payoffs = group_payoffs(preset, cell, seeds)
            add(metric, payoffs[metric.removeprefix("payoff_")], WHOLE_RUN)
    return rows


# ------------------------------------------------------------------ output

def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def gap(row: dict, tolerance: float = 0.03) -> str:
    """ours − paper on the means, marked ``short`` when more than ``tolerance`` below."""
    if row["ours_mean"] is None or not row["paper"]:
        return ""
    diff = row["ours_mean"] - float(row["paper"].split("±")[0])
    return f"{diff:+.3f}" + (" (short)" if diff < -tolerance else "")


def format_ours(row: dict) -> str:
    """``mean ± std``; payoffs (shares of a budget of 1 over ~10 agents) get a fourth decimal."""
    if row["ours_mean"] is None:
        return "–"
    if row["metric"] in ("ego_mib", "param_mib", "minutes"):
        return f"{row['ours_mean']:.1f} ± {row['ours_std']:.1f}"
    d = 4 if row["metric"].startswith("payoff_") else 3
    return f"{row['ours_mean']:.{d}f} ± {row['ours_std']:.{d}f}"


def write_tables(rows: list[dict], out: Path, title: str, notes: str) -> None:
    with (out / "table.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "ours_mean": _fmt(row["ours_mean"]),
                             "ours_std": _fmt(row["ours_std"])})
    lines = [f"# {title}", "", "| method | dataset | metric | ours | paper | ours − paper |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['method']} | {row['dataset']} | {row['metric']} | "
                     f"{format_ours(row)} | {row['paper'] or ''} | {gap(row)} |")
    if notes:
        lines += ["", notes]
    (out / "table.md").write_text("\n".join(lines) + "\n")


def reproduce(name: str, methods: list[str] | None = None, datasets: list[str] | None = None,
              seeds: int | None = None, quick: bool = False, out: Path | None = None,
              progress: bool = True, fairness_on: str = "local",
              overrides: tuple[str, ...] = (), selector: str | None = None, jobs: int = 1
              ) -> tuple[Path, list[dict], list[str]]:
    """Run preset ``name``; returns the output directory, the table rows and what was skipped.

    ``fairness_on``: the test set behind model-gradient fairness, each agent's local one
    (the spec's recommendation) or the global one (every agent's model is then also evaluated
    there). ``selector``: the rule picking each seed's round (default: the preset's).
    ``jobs``: cells run in that many worker processes at once."""
    if jobs < 1:
        raise GraphfedError(f"--jobs must be at least 1, got {jobs}")
    if fairness_on not in ("local", "global"):
        raise GraphfedError(f"fairness is measured on 'local' or 'global' test sets, not "
                            f"'{fairness_on}'")
    preset = get_preset(name)
    rule = check_selector(selector or preset.select)
    variants, wanted = select(preset, methods, datasets)
    count = seeds or (preset.quick_seeds if quick else preset.seeds)
    seed_list = list(range(count))
    out = Path(out or Path("runs") / f"reproduce-{name}{'-quick' if quick else ''}")
    runs = out / "runs"
    skipped = [f"{d}: dataset files not present under GRAPHFED_DATA" for d in wanted
               if not is_present(d)]
    try:  # every cell's config is checked before any cell runs
        cells = [Cell(variant, dataset, cell_config(preset, variant, dataset, seed_list, quick,
                                                    fairness_on, overrides))
                 for dataset in wanted if is_present(dataset) for variant in variants]
    except ConfigError as e:
        raise GraphfedError(f"preset {name}: {e}") from None
    runs.mkdir(parents=True, exist_ok=True)
    run_cells([c for c in cells if c.variant.algorithm is not None], runs, progress, jobs)
    rows, vectors = [], {}
    for cell in cells:
        reference = next((c for c in cells if c.dataset == cell.dataset
                          and c.variant.method == preset.reference), None)
        rows.extend(cell_rows(preset, cell, reference, seed_list, vectors, fairness_on, rule))
    changed = f", with {' '.join(overrides)}" if overrides else ""
    scope = f"{count} seed{'s' if count != 1 else ''}{', quick' if quick else ''}{changed}"
    title = f"{name}: {preset.description} ({scope}; select {rule}: {SELECTORS[rule]})"
    write_tables(rows, out, title, preset.notes)
    (out / "vectors.json").write_text(json.dumps(vectors, indent=1))
    for figure in preset.figures:
        figure(rows, out)
    return out, rows, skipped
