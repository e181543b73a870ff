"""Run a preset's cells (method x setting x fold, all seeds), then write ours beside the paper's
numbers.

Each cell is an ordinary run directory under ``OUT/runs/<method>-<setting>[-fold<f>]``; a finished
cell with the same config is reused and an interrupted one resumed, so a long reproduction can be
stopped and started again with the same command. A seed's number is read from the evaluated round
a selector picks (``reproduce.selection``), so finished runs are reported under another rule
without training. A table row pools every fold and seed of its (method, setting).
"""

from __future__ import annotations

import csv
import json
import math
import multiprocessing
import os
import shutil
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml

from graphfed.allocator import keep_freed_memory
from graphfed.build import federated_data
from graphfed.config import ConfigError, ExperimentConfig, load_config
from graphfed.errors import GraphfedError
from graphfed.launch import resume, run
from graphfed.mechanisms.payoff import PAYOFF_BASELINES
from graphfed.metrics import mean_std, pearson
from graphfed.reproduce.catalog import get_preset
from graphfed.reproduce.preset import Preset, Variant
from graphfed.reproduce.selection import (
    SELECTORS,
    check_selector,
    evaluated,
    selected_round,
    tag,
)
from graphfed.reproduce.settings import Setting, keep_matching, missing, parse_label, same_dataset
from graphfed.serialization import read_json, read_metrics

# nan_seeds: how many of a row's seeds recorded NaN (a client whose model diverged leaves its
# loss, and the measures over every client's loss, NaN) and were left out of its mean
COLUMNS = ("method", "dataset", "metric", "ours_mean", "ours_std", "paper", "select",
           "nan_seeds")
WHOLE_RUN = "run"  # the select value of a number over the whole run (payoffs, bytes, minutes)


@dataclass
class Cell:
    variant: Variant
    dataset: str  # the table's label of the setting
    config: ExperimentConfig | None
    fold: int | None = None
    run_dir: Path | None = None
    summary: dict | None = None

    @property
    def seeds(self) -> list[int]:
        """The seeds this cell ran (none for a row computed without training)."""
        return self.summary["seeds"] if self.summary else []


def select(preset: Preset, methods: list[str] | None, datasets: list[str] | None,
           settings: list[str] | None = None) -> tuple[list[Variant], list[str]]:
    """The variants and setting labels to run (``datasets`` keeps every setting of those
    datasets, ``settings`` the labels its ``key=value`` filters match); the fairness reference
    joins whenever it is needed."""
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
    labels = [parse_label(label, preset.setting_keys) for label in preset.datasets]
    if datasets:
        unknown = [d for d in datasets if not any(same_dataset(d, s.dataset) for s in labels)]
        if unknown:
            covered = dict.fromkeys(s.dataset for s in labels)
            raise GraphfedError(f"preset {preset.name} covers {', '.join(covered)}, "
                                f"not {unknown}")
        labels = list(dict.fromkeys(s for d in datasets for s in labels
                                    if same_dataset(d, s.dataset)))  # in the order asked
    if settings:
        labels = keep_matching(labels, settings, preset.setting_keys)
    return chosen, [s.label for s in labels]


def fold_axis(preset: Preset, folds: int | None) -> list[int | None]:
    """The folds each (method, setting) runs: ``0 .. folds-1`` (all the preset's by default),
    or one run with no fold for a preset without the axis."""
    if not preset.folds:
        if folds is not None:
            raise GraphfedError(f"--folds: preset {preset.name} has no fold axis")
        return [None]
    count = preset.folds if folds is None else folds
    if not 1 <= count <= preset.folds:
        raise GraphfedError(f"--folds {count}: preset {preset.name} has folds 1 .. "
                            f"{preset.folds}")
    return list(range(count))


def cell_config(preset: Preset, variant: Variant, dataset: str, seeds: list[int],
                quick: bool, fairness_on: str = "local", overrides: tuple[str, ...] = (),
                fold: int | None = None) -> ExperimentConfig:
    """The cell's config: the paper's protocol, the dataset's, the setting label's and the row's
    settings, the fold, then ``--quick`` and the caller's own ``overrides`` (e.g. fewer rounds),
    which win."""
    setting = parse_label(dataset, preset.setting_keys)
    extra = ["client_global_eval=true"] if fairness_on == "global" else []
    folded = [] if fold is None else [f"partition.fold={fold}"]
    settings = [*preset.base, *extra, f"dataset={setting.dataset}",
                 *preset.dataset_overrides.get(setting.dataset, []),
                 *setting.overrides(preset.setting_keys),
                 f"algorithm={variant.algorithm or 'local'}", *variant.overrides,
                 *preset.cell_overrides.get((variant.method, setting.dataset), []), *folded,
                 *(preset.quick if quick else []), *overrides, f"seeds={seeds}",
                 f"name={run_name(variant, setting, fold)}"]
    return load_config(None, settings)


def run_name(variant: Variant, setting: Setting, fold: int | None) -> str:
    return f"{variant.method}-{setting.folder}" + ("" if fold is None else f"-fold{fold}")


def run_cell(cell: Cell, runs: Path, progress: bool) -> None:
    """Reuse a finished run of this exact config, resume an interrupted one, or start it.

    A run that differs only in its seeds keeps every finished seed: raising ``--repeats`` (or
    ``--seeds``) trains only the new ones, and lowering it retrains nothing."""
    path = runs / cell.config.name
    if not _keeps_its_seeds(path, cell.config):
        cell.run_dir, cell.summary = run(cell.config, runs, progress=progress)
    elif (path / "summary.json").is_file():
        cell.run_dir, cell.summary = path, read_json(path / "summary.json", "run summary")
    else:
        cell.run_dir, cell.summary = resume(path, progress=progress)


def _keeps_its_seeds(path: Path, config: ExperimentConfig) -> bool:
    """Whether the run directory ``path`` can serve ``config``: it holds the same config but for
    the seeds (then it is made to hold ``config`` itself, its summary dropped if the seeds
    changed); otherwise whatever is there is removed."""
    wanted = config.to_dict()
    saved = _saved_config(path) if (path / "config.yaml").is_file() else None
    if saved is None or _but_seeds(saved) != _but_seeds(wanted):
        if path.exists():
            shutil.rmtree(path)
        return False
    if saved != wanted:
        (path / "summary.json").unlink(missing_ok=True)
        (path / "config.yaml").write_text(yaml.safe_dump(wanted, sort_keys=False))
    return True


def _but_seeds(config: dict) -> dict:
    return {k: v for k, v in config.items() if k not in ("seed", "seeds")}


STAGING = ".seeds"  # under OUT/runs: one run directory per seed trained by a worker


def seeds_to_train(cell: Cell, runs: Path) -> list[int]:
    """Make the cell's directory hold its config (a cell whose config differs beyond its seeds
    starts afresh) and return the seeds it has not finished."""
    path = runs / cell.config.name
    if not _keeps_its_seeds(path, cell.config):
        path.mkdir(parents=True)
        (path / "config.yaml").write_text(yaml.safe_dump(cell.config.to_dict(), sort_keys=False))
    return [s for s in cell.config.run_seeds
            if not (path / f"seed-{s}" / "summary.json").is_file()]


def _train_seed(cell: Cell, seed: int, runs: Path) -> Path:
    """One seed of a cell as a run of its own under ``runs/.seeds`` (reused or resumed there
    like any cell); returns its directory."""
    config = cell.config.model_copy(update={"seeds": [seed], "seed": seed,
                                            "name": f"{cell.config.name}-seed{seed}"})
    staged = Cell(cell.variant, cell.dataset, config, cell.fold)
    run_cell(staged, runs / STAGING, progress=False)
    return staged.run_dir


def _adopt_seed(staged: Path, cell_dir: Path, seed: int) -> None:
    """Move a worker's finished seed into its cell's directory."""
    target = cell_dir / f"seed-{seed}"
    if target.exists():
        shutil.rmtree(target)
    shutil.move(str(staged / f"seed-{seed}"), str(target))
    shutil.rmtree(staged)


def _share_cores(jobs: int) -> None:
    """A worker's torch threads: the machine's cores split between the workers; and the
    allocator the command line sets up (a spawned worker starts without it)."""
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // jobs))
    keep_freed_memory()


def run_cells(cells: list[Cell], runs: Path, progress: bool, jobs: int) -> None:
    """Run (or reuse, or resume) every cell. With ``jobs > 1`` every unfinished seed of every
    cell is a task of its own for that many worker processes, which share the machine's cores
    and its GPU: a worker trains the seed as a run under ``runs/.seeds`` (an interrupted one
    resumes there), the finished seed moves into its cell, and each cell's summary is then
    written from its seeds. A seed's run depends on its config and seed alone, so the table
    is the one ``jobs = 1`` gives."""
    if jobs > 1:
        tasks = [(cell, seed) for cell in cells for seed in seeds_to_train(cell, runs)]
        if len(tasks) > 1:
            _train_seeds(tasks, runs, progress, jobs)
    for cell in cells:
        run_cell(cell, runs, progress)


def _train_seeds(tasks: list[tuple[Cell, int]], runs: Path, progress: bool, jobs: int) -> None:
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    with ProcessPoolExecutor(min(jobs, len(tasks)), mp_context=context,
                             initializer=_share_cores, initargs=(jobs,)) as pool:
        futures = {pool.submit(_train_seed, cell, seed, runs): (cell, seed)
                   for cell, seed in tasks}
        adopt_finished(as_completed(futures), futures, runs, progress)


def adopt_finished(completed: Iterable[Future], tasks: dict[Future, tuple[Cell, int]],
                   runs: Path, progress: bool) -> None:
    """Move every seed that finished into its cell as it completes. A seed that failed does
    not cost the others theirs: they are all adopted, then the failures are raised together
    (a failed seed stays under ``runs/.seeds``, to resume from its last checkpoint)."""
    failed = []
    for done, future in enumerate(completed, 1):
        cell, seed = tasks[future]
        try:
            staged = future.result()
        except Exception as error:  # reported below, after the others are adopted
            failed.append(f"{cell.config.name} seed {seed}: {error}")
            continue
        _adopt_seed(staged, runs / cell.config.name, seed)
        if progress:
            print(f"[{done}/{len(tasks)}] {cell.config.name} seed {seed} finished", flush=True)
    if failed:
        raise GraphfedError(f"{len(failed)} of {len(tasks)} seeds failed (the others are in "
                            f"their cells): " + "; ".join(failed))


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
              "local_f1": "test_acc", "global_f1": "client_global_test_acc",
              "acc": "test_acc", "acc_best_last_10": "test_acc",
              "global_loss": "global_test_loss", "client_loss": "train_loss_deployed",
              "loss_var": "train_loss_deployed_var",
              "loss_entropy": "train_loss_deployed_entropy",
              "overall_acc": "test_acc_pooled", "minority_acc": "test_minority_acc_pooled"}
# a per-round metric whose name fixes its selector, whatever the table's (FedSpray's pooled
# accuracies are, by definition, those of the round of lowest pooled validation loss)
FIXED_RULES = {"acc_best_last_10": "best_last_10", "overall_acc": "min_val_loss",
               "minority_acc": "min_val_loss"}
# numbers of the whole run -> the decimals a table shows them with
WHOLE_RUN_METRICS = {"ego_mib": 1, "param_mib": 1, "minutes": 1, "seconds_per_round": 2,
                     "model_bytes": 0, "feature_bytes": 0, "link_bytes": 0, "extra_ratio": 4}


# a per-round metric that is the worst of the clients' values in the selected round -> the
# per-client key it reads (the worst client's loss: the measure AFL minimises, q-FFL's limit)
CLIENT_WORST = {"loss_max": "train_loss_deployed"}

# numbers the server records each round, reported from the last round that has them
SERVER_RECORDS = ("overlap_rank_corr", "separation_auc", "node_ratio_mae")


def last_server_record(cell: Cell, seed: int, key: str) -> float | None:
    values = [line["server"][key] for line in seed_lines(cell, seed)
              if key in line.get("server", {})]
    return values[-1] if values else None


def worst_client(line: dict, key: str) -> float | None:
    """The largest per-client ``key`` of a round's line: NaN if any client's is NaN (a
    diverged client is the worst), None if no client reports it."""
    values = [c[key] for c in line.get("clients", []) if key in c]
    if not values:
        return None
    return float("nan") if any(math.isnan(v) for v in values) else max(values)


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
    """A per-seed number of the whole run: upload MiB, minutes or seconds per round."""
    if metric in ("minutes", "seconds_per_round"):
        summary = read_json(cell.run_dir / f"seed-{seed}" / "summary.json", "seed summary",
                            ("seconds", "rounds"))
        return summary["seconds"] / (60 if metric == "minutes" else summary["rounds"])
    lines = [line for line in seed_lines(cell, seed) if line["round"] > 0]
    ego = sum(line.get("server", {}).get("upload_ego_bytes", 0) for line in lines)
    return (ego if metric == "ego_mib" else sum(x["bytes_up"] for x in lines) - ego) / MIB


def cell_rows(preset: Preset, variant: Variant, dataset: str, cells: list[Cell],
              references: dict[tuple[str, int | None], Cell], seeds: list[int], vectors: dict,
              fairness_on: str = "local", rule: str = "final") -> list[dict]:
    """The rows of one (method, setting) over its ``cells`` (one per fold; none for a setting
    that could not run, which keeps only the paper's numbers); a per-round metric is read, per
    seed, from the round ``rule`` (or the metric's own rule) picks."""
    rows = []

    def add(metric: str, values: list[float] | None, select: str = rule) -> None:
        paper = preset.paper.get((variant.method, dataset, metric), "")
        if not values and not paper:
            return
        finite = [v for v in values or [] if not math.isnan(v)]
        mean, std = mean_std(finite) if finite else (None, None)
        rows.append({"method": variant.method, "dataset": dataset, "metric": metric,
                     "ours_mean": mean, "ours_std": std, "paper": paper, "select": select,
                     "nan_seeds": len(values or []) - len(finite)})

    for metric in preset.metrics:
        if metric in ROUND_KEYS:
            key, chosen = ROUND_KEYS[metric], FIXED_RULES.get(metric, rule)
            values = [seed_round(c, s, key, chosen).get(key) for c in cells for s in c.seeds]
            add(metric, None if None in values else values, chosen)
        elif metric in CLIENT_WORST:
            key = CLIENT_WORST[metric]
            values = [worst_client(seed_round(c, s, key, rule), key) for c in cells
                      for s in c.seeds]
            add(metric, None if None in values else values)
        elif metric == "gradient_fairness":
            values = _fairness(cells, references, vectors, fairness_on, rule)
            if values is not None or not cells:
                add(metric, values)
        elif metric in WHOLE_RUN_METRICS:
            add(metric, [run_metric(c, s, metric) for c in cells for s in c.seeds], WHOLE_RUN)
        elif metric in SERVER_RECORDS:
            values = [last_server_record(c, s, metric) for c in cells for s in c.seeds]
            add(metric, None if None in values else values, "final")
        elif metric.startswith("payoff_"):
            group = metric.removeprefix("payoff_")
            add(metric, [v for c in cells for v in group_payoffs(preset, c, seeds)[group]],
                WHOLE_RUN)
    return rows


def _fairness(cells: list[Cell], references: dict[tuple[str, int | None], Cell],
              vectors: dict, on: str, rule: str) -> list[float] | None:
    """Every seed's fairness over ``cells``, each against the reference run of its setting and
    fold (its vectors kept in ``vectors``); None for the reference itself or without one."""
    values = None
    for cell in cells:
        reference = references.get((cell.dataset, cell.fold))
        if reference is None or reference is cell:
            continue
        pairs = fairness_vectors(reference, cell, on, rule)
        fold = "" if cell.fold is None else f"/fold={cell.fold}"
        vectors[f"{cell.variant.method}/{cell.dataset}{fold}"] = pairs
        values = (values or []) + [p["pearson"] for p in pairs.values()]
    return values


# ------------------------------------------------------------------ output

def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def gap(row: dict, tolerance: float = 0.03) -> str:
    """ours − paper on the means, marked ``short`` when more than ``tolerance`` below."""
    if row["ours_mean"] is None or not row["paper"]:
        return ""
    diff = row["ours_mean"] - float(row["paper"].split("±")[0])
    return f"{diff:+.3f}" + (" (short)" if diff < -tolerance else "")


# metrics a table shows with a fourth decimal: payoffs (shares of a budget of 1 over ~10
# agents) and FairGFL's loss variances (thousandths)
FINE = ("payoff_", "loss_var")


def format_ours(row: dict) -> str:
    """``mean ± std``, with seeds left out as NaN counted beside it."""
    nan = row.get("nan_seeds", 0)
    left_out = f" (NaN in {nan} seed{'s' if nan > 1 else ''}, left out)" if nan else ""
    if row["ours_mean"] is None:
        return "–" + left_out
    d = WHOLE_RUN_METRICS.get(row["metric"], 4 if row["metric"].startswith(FINE) else 3)
    return f"{row['ours_mean']:.{d}f} ± {row['ours_std']:.{d}f}{left_out}"


def write_tables(rows: list[dict], out: Path, title: str, notes: str, rule: str) -> None:
    """``table.csv`` and ``table.md``; a row whose selector is not the title's ``rule`` names
    its own beside the metric."""
    with (out / "table.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, "ours_mean": _fmt(row["ours_mean"]),
                             "ours_std": _fmt(row["ours_std"])})
    lines = [f"# {title}", "", "| method | dataset | metric | ours | paper | ours − paper |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        metric = row["metric"] if row["select"] in (rule, WHOLE_RUN) else (
            f"{row['metric']}, {tag(row['select'])}")
        lines.append(f"| {row['method']} | {row['dataset']} | {metric} | "
                     f"{format_ours(row)} | {row['paper'] or ''} | {gap(row)} |")
    if notes:
        lines += ["", notes]
    (out / "table.md").write_text("\n".join(lines) + "\n")


def reproduce(name: str, methods: list[str] | None = None, datasets: list[str] | None = None,
              seeds: int | None = None, quick: bool = False, out: Path | None = None,
              progress: bool = True, fairness_on: str = "local",
              overrides: tuple[str, ...] = (), selector: str | None = None, jobs: int = 1,
              settings: list[str] | None = None, folds: int | None = None
              ) -> tuple[Path, list[dict], list[str]]:
    """Run preset ``name``; returns the output directory, the table rows and what was skipped.

    ``fairness_on``: the test set behind model-gradient fairness, each agent's local one
    (the spec's recommendation) or the global one (every agent's model is then also evaluated
    there). ``selector``: the rule picking each seed's round (default: the preset's).
    ``jobs``: cells run in that many worker processes at once. ``settings``: ``key=value``
    filters of the setting labels. ``folds``: run folds ``0 .. folds-1`` of a preset with a
    fold axis (``seeds`` are then each fold's repeats)."""
    if jobs < 1:
        raise GraphfedError(f"--jobs must be at least 1, got {jobs}")
    if fairness_on not in ("local", "global"):
        raise GraphfedError(f"fairness is measured on 'local' or 'global' test sets, not "
                            f"'{fairness_on}'")
    preset = get_preset(name)
    if preset.computed is not None:
        return _computed(preset, seeds or (preset.quick_seeds if quick else preset.seeds), out,
                         quick)
    rule = check_selector(selector or preset.select)
    variants, wanted = select(preset, methods, datasets, settings)
    fold_list = fold_axis(preset, folds)
    count = seeds or (preset.quick_seeds if quick else preset.seeds)
    seed_list = list(range(count))
    out = Path(out or Path("runs") / f"reproduce-{name}{'-quick' if quick else ''}")
    runs = out / "runs"
    reasons = {label: missing(parse_label(label, preset.setting_keys).dataset)
               for label in wanted}
    try:  # every cell's config is checked before any cell runs
        cells = [Cell(variant, label, cell_config(preset, variant, label, seed_list, quick,
                                                  fairness_on, overrides, fold), fold)
                 for label in wanted if reasons[label] is None for variant in variants
                 for fold in fold_list]
    except ConfigError as e:
        raise GraphfedError(f"preset {name}: {e}") from None
    runs.mkdir(parents=True, exist_ok=True)
    run_cells([c for c in cells if c.variant.algorithm is not None], runs, progress, jobs)
    references = {(c.dataset, c.fold): c for c in cells if c.variant.method == preset.reference}
    rows, vectors = [], {}
    for label in wanted:
        if reasons[label] is not None and not preset.report_missing:
            continue
        for variant in variants:
            mine = [c for c in cells if c.dataset == label and c.variant is variant]
            rows.extend(cell_rows(preset, variant, label, mine, references, seed_list, vectors,
                                  fairness_on, rule))
    if preset.table_label is not None:
        rows = [{**row, "dataset": preset.table_label(row["dataset"])} for row in rows]
    title = f"{name}: {preset.description} ({_scope(count, fold_list, quick, overrides)}; " \
            f"select {rule}: {SELECTORS[rule]})"
    write_tables(rows, out, title, preset.notes, rule)
    (out / "vectors.json").write_text(json.dumps(vectors, indent=1))
    for figure in preset.figures:
        figure(rows, out)
    return out, rows, list(dict.fromkeys(r for r in reasons.values() if r is not None))


def _computed(preset: Preset, seeds: int, out: Path | None, quick: bool
              ) -> tuple[Path, list[dict], list[str]]:
    """A preset computed without training: its rows beside the paper's numbers."""
    out = Path(out or Path("runs") / f"reproduce-{preset.name}{'-quick' if quick else ''}")
    out.mkdir(parents=True, exist_ok=True)
    rows = [{**row, "paper": preset.paper.get((row["method"], row["dataset"], row["metric"]), ""),
             "select": WHOLE_RUN} for row in preset.computed(seeds)]
    title = f"{preset.name}: {preset.description} ({seeds} seed{'s' if seeds != 1 else ''})"
    write_tables(rows, out, title, preset.notes, WHOLE_RUN)
    for figure in preset.figures:
        figure(rows, out)
    return out, rows, []


def _scope(count: int, folds: list[int | None], quick: bool, overrides: tuple[str, ...]) -> str:
    """What a table's numbers pool: the seeds (each fold's repeats), the folds, the changes."""
    scope = f"{count} seed{'s' if count != 1 else ''}"
    if folds != [None]:
        scope = f"folds 0-{folds[-1]} x {scope} each"
    changed = f", with {' '.join(overrides)}" if overrides else ""
    return f"{scope}{', quick' if quick else ''}{changed}"
