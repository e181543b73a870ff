"""Write a reproduction's rows: ``table.csv`` for tools, ``table.md`` for people, and the
preset's figures, all from the same rows."""

from __future__ import annotations

import csv
import json
import shlex
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

from graphfed.reproduce.preset import Preset
from graphfed.reproduce.score import WHOLE_RUN, metric_kind
from graphfed.reproduce.selection import tag

# ci_low, ci_high: the 95 % Student-t interval of the mean over the n_seeds finite seeds (empty
# below two); nan_seeds: how many of a row's seeds recorded NaN (a client whose model diverged
# leaves its loss, and the measures over every client's loss, NaN) and were left out of its mean
COLUMNS = ("method", "dataset", "metric", "ours_mean", "ours_std", "ci_low", "ci_high",
           "n_seeds", "paper", "select", "nan_seeds")
INTERVAL = ("ci_low", "ci_high")


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def gap(row: dict, tolerance: float = 0.03) -> str:
    """ours − paper on the means, marked ``short`` or ``above`` beyond ``tolerance``: a cell
    far above the paper is as much a finding as one far below."""
    if row["ours_mean"] is None or not row["paper"]:
        return ""
    diff = row["ours_mean"] - float(row["paper"].split("±")[0])
    mark = " (short)" if diff < -tolerance else " (above)" if diff > tolerance else ""
    return f"{diff:+.3f}{mark}"


def format_ours(row: dict) -> str:
    """``mean ± std`` with the metric's decimals, seeds left out as NaN counted beside it."""
    nan = row.get("nan_seeds", 0)
    left_out = f" (NaN in {nan} seed{'s' if nan > 1 else ''}, left out)" if nan else ""
    if row["ours_mean"] is None:
        return "–" + left_out
    d = metric_kind(row["metric"]).decimals
    return f"{row['ours_mean']:.{d}f} ± {row['ours_std']:.{d}f}{left_out}"


def format_interval(row: dict) -> str:
    """``[low, high]`` with the metric's decimals; empty without an interval."""
    if row.get("ci_low") is None:
        return ""
    d = metric_kind(row["metric"]).decimals
    return f"[{row['ci_low']:.{d}f}, {row['ci_high']:.{d}f}]"


def clear_winners(rows: list[dict]) -> set[int]:
    """The indices of the rows marked best: in each (dataset, metric, selector) with a known
    better direction, the best mean, but only when its 95 % interval clears the runner-up's
    (a lead inside the seeds' noise is not a win)."""
    groups: dict[tuple, list[int]] = {}
    for i, row in enumerate(rows):
        if row.get("ci_low") is not None:
            groups.setdefault((row["dataset"], row["metric"], row["select"]), []).append(i)
    winners = set()
    for (_, metric, _), members in groups.items():
        direction = metric_kind(metric).direction()
        if direction is None or len(members) < 2:
            continue
        sign = 1 if direction == "higher" else -1
        best, runner = sorted(members, key=lambda i: -sign * rows[i]["ours_mean"])[:2]
        if sign * (rows[best]["ci_low" if sign > 0 else "ci_high"]
                   - rows[runner]["ci_high" if sign > 0 else "ci_low"]) > 0:
            winners.add(best)
    return winners


def write_tables(rows: list[dict], out: Path, title: str, notes: str, rule: str) -> None:
    """``table.csv`` and ``table.md``; a row whose selector is not the title's ``rule`` names
    its own beside the metric; the best row of a setting is bold where it clearly wins
    (``clear_winners``)."""
    with (out / "table.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in rows:
            writer.writerow({**row, **{k: _fmt(row.get(k)) for k in (
                "ours_mean", "ours_std", *INTERVAL)}, "n_seeds": row.get("n_seeds", "")})
    winners = clear_winners(rows)
    lines = [f"# {title}", "", "| method | dataset | metric | ours | 95 % CI | seeds | paper "
             "| ours − paper |", "|---|---|---|---|---|---|---|---|"]
    for i, row in enumerate(rows):
        metric = row["metric"] if row["select"] in (rule, WHOLE_RUN) else (
            f"{row['metric']}, {tag(row['select'])}")
        ours = f"**{format_ours(row)}**" if i in winners else format_ours(row)
        lines.append(f"| {row['method']} | {row['dataset']} | {metric} | {ours} | "
                     f"{format_interval(row)} | {row.get('n_seeds', '')} | "
                     f"{row['paper'] or ''} | {gap(row)} |")
    lines += ["", "ours: mean ± std (population) over the seeds; 95 % CI: Student-t interval "
              "of the mean; bold: the best row of its setting whose interval clears the "
              "runner-up's."]
    if notes:
        lines += ["", notes]
    (out / "table.md").write_text("\n".join(lines) + "\n")


def publish(preset: Preset, rows: list[dict], out: Path, title: str, rule: str,
            engines: list[str]) -> None:
    """The tables, what produced them (``provenance.json``), then the preset's figures."""
    write_tables(rows, out, title, preset.notes, rule)
    (out / "provenance.json").write_text(json.dumps(provenance(engines), indent=1) + "\n")
    for figure in preset.figures:
        figure(rows, out)


def provenance(engines: list[str]) -> dict:
    """The code and command behind a table: the checkout's commit (None outside one) and
    whether it had uncommitted changes, the command line, the engines its cells trained on."""
    from importlib.metadata import version

    import torch

    source = Path(__file__).resolve().parents[1]  # the package: a change anywhere in it counts

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", str(source), *args], capture_output=True,
                                  text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    return {"commit": commit,
            "dirty": None if commit is None else bool(git("status", "--porcelain", "--", ".")),
            "command": shlex.join(["graphfed", *sys.argv[1:]]) if sys.argv[0].endswith(
                ("graphfed", "graphfed/cli/__main__.py")) else shlex.join(sys.argv),
            "engine": sorted(set(engines)) or ["none (computed)"],
            "graphfed": version("graphfed"), "torch": torch.__version__,
            "written": datetime.now(timezone.utc).isoformat(timespec="seconds")}


def scope(count: int, folds: list[int | None], quick: bool, overrides: tuple[str, ...]) -> str:
    """What a table's numbers pool: the seeds (each fold's repeats), the folds, the changes."""
    scope = f"{count} seed{'s' if count != 1 else ''}"
    if folds != [None]:
        scope = f"folds 0-{folds[-1]} x {scope} each"
    changed = f", with {' '.join(overrides)}" if overrides else ""
    return f"{scope}{', quick' if quick else ''}{changed}"
