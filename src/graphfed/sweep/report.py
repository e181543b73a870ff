"""A sweep's outputs: each method's winning config re-run over the seeds is scored once on test
(``reproduce``'s scoring: mean ± std and the 95 % t interval), written as ``table.csv`` (the
reproduction columns plus ``trials``), ``table.md``, ``trials.csv`` (every trial's slot, value
and values), ``best/<method>.yaml`` (an ordinary config: ``graphfed run`` on it re-runs the
cell), ``provenance.json`` and ``sweep.json`` (how the table was made, the partition's
heterogeneity card: what ``graphfed leaderboard`` reads beside the table)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import yaml

from graphfed.config import ExperimentConfig
from graphfed.reproduce.plan import Cell
from graphfed.reproduce.preset import Preset
from graphfed.reproduce.score import RoundValue, Scoring, cell_rows, register_metrics
from graphfed.reproduce.write import (
    COLUMNS,
    INTERVAL,
    clear_winners,
    format_interval,
    format_ours,
    provenance,
)
from graphfed.sweep.study import SLOT, MethodStudy

# the winner's test accuracy (the mean over clients, as the objective's validation accuracy),
# at the round the sweep's validation rule picks
METRICS = register_metrics({"test_acc": RoundValue("test_acc")})
TABLE_COLUMNS = (*COLUMNS, "trials")
ABOUT = "sweep.json"


def rows(finals: list[tuple[MethodStudy, Cell]], seeds: list[int], rule: str) -> list[dict]:
    """The table rows of every method's final cell, with the number of trials it was given."""
    out = []
    for method, cell in finals:
        preset = Preset(name="sweep", description="", variants=[cell.variant],
                        datasets=[cell.dataset], metrics=METRICS, base=[])
        trials = len(method.finished())
        out += [{**row, "trials": trials} for row in cell_rows(
            Scoring(preset, seeds, rule), cell.variant, cell.dataset, [cell])]
    return out


def write(out: Path, table: list[dict], finals: list[tuple[MethodStudy, Cell]],
          title: str) -> None:
    """Every output file of the sweep under ``out``."""
    with (out / "table.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=TABLE_COLUMNS)
        writer.writeheader()
        for row in table:
            writer.writerow({**row, **{k: "" if row.get(k) is None else f"{row[k]:.4f}"
                                       for k in ("ours_mean", "ours_std", *INTERVAL)}})
    _write_markdown(out / "table.md", table, finals, title)
    _write_trials(out / "trials.csv", [study for study, _ in finals])
    best = out / "best"
    best.mkdir(exist_ok=True)
    for study, cell in finals:
        assert cell.config is not None
        (best / f"{study.method}.yaml").write_text(best_yaml(cell.config))
    engines: list[str] = [cell.config.engine for _, cell in finals if cell.config is not None]
    (out / "provenance.json").write_text(json.dumps(provenance(engines), indent=1) + "\n")


def write_about(out: Path, about: dict) -> None:
    (out / ABOUT).write_text(json.dumps(about, indent=1) + "\n")


def run_seconds(run_dir: Path) -> float:
    """The seconds a finished run directory's summary says it took (0 without one)."""
    try:
        return float(json.loads((run_dir / "summary.json").read_text()).get("seconds") or 0.0)
    except (OSError, ValueError, AttributeError):
        return 0.0


def best_yaml(config: ExperimentConfig) -> str:
    return yaml.safe_dump(config.to_dict(), sort_keys=False)


def _write_markdown(path: Path, table: list[dict], finals: list[tuple[MethodStudy, Cell]],
                    title: str) -> None:
    winners = clear_winners(table)
    lines = [f"# {title}", "", "| method | dataset | metric | test (mean ± std) | 95 % CI | "
             "seeds | trials |", "|---|---|---|---|---|---|---|"]
    for i, row in enumerate(table):
        ours = f"**{format_ours(row)}**" if i in winners else format_ours(row)
        lines.append(f"| {row['method']} | {row['dataset']} | {row['metric']} | {ours} | "
                     f"{format_interval(row)} | {row['n_seeds']} | {row['trials']} |")
    lines += ["", "test: mean ± std (population) over the seeds of the winning config, at the "
              "round the validation rule picks; 95 % CI: Student-t interval of the mean; bold: "
              "the best row of its metric whose interval clears the runner-up's.", "",
              "Winning values (chosen on validation, trial seed 0):", ""]
    for study, _ in finals:
        chosen = study.best()
        values = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
                           for k, v in sorted(chosen.params.items()))
        lines.append(f"- {study.method} (trial slot {chosen.user_attrs[SLOT]}, "
                     f"validation {chosen.value:.4f}): {values}")
    path.write_text("\n".join(lines) + "\n")


def _write_trials(path: Path, studies: list[MethodStudy]) -> None:
    """Every finished trial of every method: what was tried and how it scored."""
    keys = sorted({k for study in studies for k in study.space})
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["method", "slot", "value", *keys])
        for study in studies:
            for trial in sorted(study.finished(), key=lambda t: t.user_attrs[SLOT]):
                writer.writerow([study.method, trial.user_attrs[SLOT], trial.value,
                                 *(trial.params.get(k, "") for k in keys)])
