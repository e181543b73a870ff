"""The leaderboard: finished sweep folders rendered as one Markdown page, a table per (dataset,
protocol).

Each table ranks the methods by their mean test number (the winner of an equal-budget search
on validation, re-run over seeds), with mean ± std, the 95 % t interval, the seeds and the
trials, bold only where ``reproduce.write.clear_winners`` says the interval clears the
runner-up's. Its caption says how the numbers were made (budget, sampler, the validation
rule, the seeds), the partition's heterogeneity card stands beside it, and every row links
the exact config (``best/<method>.yaml``) that ``graphfed run`` re-runs. The page reads only
what a sweep keeps for it (``table.csv``, ``best/``, ``sweep.json``, ``provenance.json``), so
a folder stripped of its run directories still renders. Sweeps made by a preset also list what
the preset has that the folders do not cover: datasets not swept, methods not run, and why a
method is left out.
"""

from __future__ import annotations

import csv
import json
import os
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from graphfed.data.heterogeneity import MEANINGS
from graphfed.errors import GraphfedError
from graphfed.reproduce.score import metric_kind
from graphfed.reproduce.write import INTERVAL, clear_winners, format_interval, format_ours
from graphfed.sweep.preset import PRESETS, SweepPreset
from graphfed.sweep.report import ABOUT, TABLE_COLUMNS

FLOATS = ("ours_mean", "ours_std", *INTERVAL)
COUNTS = ("n_seeds", "nan_seeds", "trials")
NEEDED = ("dataset", "protocol", "methods", "budget", "sampler", "objective", "objective_help",
          "rule", "seeds", "heterogeneity")  # the sweep.json keys a table's caption reads


@dataclass(frozen=True)
class Sweep:
    """One finished sweep folder: its table rows (numbers parsed), what ``sweep.json`` records
    and the command behind it (``provenance.json``; empty without one)."""

    folder: Path
    rows: list[dict[str, Any]]
    about: dict[str, Any]
    provenance: dict[str, Any]

    @property
    def key(self) -> tuple[str, str]:
        return self.about["dataset"], self.about["protocol"]


def _not_finished(folder: Path, why: str) -> GraphfedError:
    return GraphfedError(f"{folder} is not a finished sweep: {why} (run graphfed sweep ... "
                         f"--out {folder} to finish it)")


def _json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _row(raw: dict[str, str]) -> dict[str, Any]:
    """A ``table.csv`` row with its numbers as numbers (an empty cell None)."""
    return {**raw, **{k: float(raw[k]) if raw[k] else None for k in FLOATS},
            **{k: int(raw[k]) if raw[k] else 0 for k in COUNTS}}


def read_sweep(folder: Path) -> Sweep:
    """The finished sweep in ``folder``; ``GraphfedError`` (one line) for anything else."""
    if not folder.is_dir():
        raise GraphfedError(f"{folder} is not a directory")
    about = _json(folder / ABOUT)
    if about is None:
        raise _not_finished(folder, f"no readable {ABOUT}")
    missing = [k for k in NEEDED if k not in about]
    if missing:
        raise _not_finished(folder, f"{ABOUT} lacks {', '.join(missing)}")
    try:
        with (folder / "table.csv").open(newline="") as f:
            reader = csv.DictReader(f)
            if tuple(reader.fieldnames or ()) != TABLE_COLUMNS:
                raise _not_finished(folder, "table.csv is not a sweep's table")
            rows = [_row(raw) for raw in reader]
    except FileNotFoundError:
        raise _not_finished(folder, "no table.csv") from None
    except ValueError:
        raise _not_finished(folder, "table.csv holds a number that is not one") from None
    if not rows:
        raise _not_finished(folder, "table.csv has no row")
    unlinked = [r["method"] for r in rows
                if not (folder / "best" / f"{r['method']}.yaml").is_file()]
    if unlinked:
        raise _not_finished(folder, f"no best/{unlinked[0]}.yaml")
    return Sweep(folder, rows, about, _json(folder / "provenance.json") or {})


def read_sweeps(dirs: list[Path]) -> list[Sweep]:
    """The sweeps of ``dirs``: each a sweep folder, or a folder of them (a preset's ``--out``);
    two sweeps of one (dataset, protocol) are refused (which would the table show?)."""
    sweeps: list[Sweep] = []
    for folder in dirs:
        inner = sorted(p.parent for p in folder.glob(f"*/{ABOUT}"))
        if not (folder / ABOUT).exists() and inner:
            sweeps += [read_sweep(p) for p in inner]
        else:
            sweeps.append(read_sweep(folder))
    seen: dict[tuple[str, str], Path] = {}
    for sweep in sweeps:
        if sweep.key in seen:
            raise GraphfedError(f"two sweeps of {sweep.key[0]} under {sweep.key[1]}: "
                                f"{seen[sweep.key]} and {sweep.folder}; give one")
        seen[sweep.key] = sweep.folder
    return sweeps


def ranked(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` best first by mean in their metric's better direction; rows without a mean
    last."""
    def order(row: dict[str, Any]) -> tuple[bool, float]:
        if row["ours_mean"] is None:
            return True, 0.0
        sign = -1 if metric_kind(row["metric"]).direction() == "lower" else 1
        return False, -sign * row["ours_mean"]
    return sorted(rows, key=order)


def _link(target: Path, page: Path) -> str:
    """``target`` relative to the page's folder, as a Markdown link path."""
    return Path(os.path.relpath(target.resolve(), page.resolve().parent)).as_posix()


def _seeds(seeds: list[int]) -> str:
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def caption(about: dict[str, Any]) -> str:
    """How a table's numbers were made: the budget and sampler, the validation-only objective
    and selection rule, the seeds."""
    budget, seeds = about["budget"], about["seeds"]
    trials = f"{budget} trial{'s' * (budget != 1)}"
    sampler = (f"the grid sampler: the first {trials} of the full grid shuffled with seed "
               f"{about.get('grid_seed', 0)}" if about["sampler"] == "grid"
               else "Optuna's TPE sampler, seed 0")
    return (f"Budget: {trials} per method, equal for every method ({sampler}); each "
            f"trial trained on seed {about.get('trial_seed', 0)} and scored on the validation "
            f"split only, objective `{about['objective']}`: {about['objective_help']}. Each "
            f"method's best trial re-run on seeds {_seeds(seeds)} ({len(seeds)} seeds) and "
            f"reported once on test at the round `{about['rule']}` picks (validation). "
            "Ranked by the mean; mean ± std over the seeds; 95 % CI: Student-t interval of the "
            "mean; **bold** only where the leader's interval clears the runner-up's.")


def _value(value: Any) -> str:
    if value is None:
        return "–"
    return str(value) if isinstance(value, int) else f"{value:.4f}"


def card_lines(card: dict[str, Any] | None) -> list[str]:
    """The partition's heterogeneity card as a Markdown table (a note when the sweep has
    none)."""
    if not card:
        return ["The sweep recorded no heterogeneity card for its partition."]
    return ["| measure | value | what it is |", "|---|---|---|",
            *(f"| `{key}` | {_value(card.get(key))} | {meaning} |"
              for key, meaning in MEANINGS.items())]


def table_lines(sweep: Sweep, page: Path) -> list[str]:
    """The ranked table of one sweep, a row linking its config."""
    rows = ranked(sweep.rows)
    winners = clear_winners(rows)
    metric = rows[0]["metric"]
    lines = [f"| # | method | {metric} (mean ± std) | 95 % CI | seeds | trials | config |",
             "|---|---|---|---|---|---|---|"]
    for i, row in enumerate(rows):
        ours = format_ours(row)
        config = sweep.folder / "best" / f"{row['method']}.yaml"
        lines.append(f"| {i + 1} | {row['method']} | {f'**{ours}**' if i in winners else ours}"
                     f" | {format_interval(row)} | {row['n_seeds']} | {row['trials']} | "
                     f"[{row['method']}.yaml]({_link(config, page)}) |")
    return lines


def section(sweep: Sweep, page: Path) -> list[str]:
    """A (dataset, protocol)'s part of the page: table, caption, the partition's card, where
    the numbers come from."""
    dataset, protocol = sweep.key
    about = sweep.about
    none_bold = "" if clear_winners(sweep.rows) else (" *No row is bold: no lead clears the "
                                                       "seeds' noise.*")
    return [f"## {dataset} · {protocol}", "", *table_lines(sweep, page), "",
            f"*{caption(about)}*{none_bold}", "",
            f"Heterogeneity card of the partition (`{about.get('partition_id')}`, "
            f"{_drawn(about.get('partition_seed'))}):", "", *card_lines(about["heterogeneity"]),
            "", *_provenance(sweep, page), ""]


def _drawn(seed: int | None) -> str:
    """Which runs the card's partition is: all of them, or seed 0's."""
    if seed is None:
        return "seed 0's: each seed draws its own partition"
    return f"drawn once with seed {seed}: the same for every method and seed"


def _provenance(sweep: Sweep, page: Path) -> list[str]:
    """Where a table comes from: its folder, the command and commit, the training time, and
    the methods the protocol's checks left out."""
    prov = sweep.provenance
    made = [f"Sweep folder [`{sweep.folder.name}`]({_link(sweep.folder / 'table.md', page)}) "
            f"(every trial: [trials.csv]({_link(sweep.folder / 'trials.csv', page)}))"]
    if prov.get("command"):
        made.append(f"made by `{prov['command']}`")
    if prov.get("commit"):
        made.append(f"at commit `{prov['commit'][:12]}`"
                    + (" with uncommitted changes" if prov.get("dirty") else ""))
    if seconds := sweep.about.get("run_seconds"):
        made.append("its runs trained " + (f"{seconds:.0f} s" if seconds < 120
                                           else f"{seconds / 60:.0f} min") + " in all (the "
                    "rounds' time, summed over runs)")
    lines = ["; ".join(made) + "."]
    skipped = sweep.about.get("skipped") or {}
    if skipped:
        lines += ["", f"Left out by the protocol's config checks ({len(skipped)}):", "",
                  *(f"- {m}: {why}" for m, why in sorted(skipped.items()))]
    return lines


def uncovered(sweeps: list[Sweep]) -> list[str]:
    """For each preset the sweeps came from: its datasets not swept and, on a swept dataset,
    its methods not run, with what one method's cell costs."""
    lines: list[str] = []
    for name in sorted({s.about["preset"] for s in sweeps if s.about.get("preset") in PRESETS}):
        preset = PRESETS[name]
        done = {s.about["dataset"]: s for s in sweeps if s.about.get("preset") == name}
        lines += [f"### Preset `{name}`", "", f"{preset.description}.", ""]
        for dataset in preset.datasets:
            lines.append(f"- {dataset}: {_missing(preset, dataset, done.get(dataset))}")
        lines += ["", f"Cost: {preset.cost}.", ""]
    return lines


def _missing(preset: SweepPreset, dataset: str, sweep: Sweep | None) -> str:
    """What ``preset`` would run on ``dataset`` that ``sweep`` (None: not swept) lacks."""
    lineup = preset.lineup(dataset)
    per_method = (f"{preset.budget} trials + {preset.seeds - 1} more seeds = "
                  f"{preset.budget + preset.seeds - 1} runs a method at the preset's budget")
    if sweep is None:
        return (f"not swept; {len(lineup.methods)} methods ({per_method}: "
                f"{len(lineup.methods) * (preset.budget + preset.seeds - 1)} runs)")
    run = {r["method"] for r in sweep.rows}
    left = [m for m in lineup.methods if m not in run]
    budget, seeds = sweep.about["budget"], len(sweep.about["seeds"])
    smaller = ("" if (budget, seeds) == (preset.budget, preset.seeds) else
               f" at budget {budget} and {seeds} seeds (the preset's: {preset.budget} and "
               f"{preset.seeds})")
    if not left:
        return f"all {len(lineup.methods)} methods swept{smaller}"
    return (f"{len(run)} of {len(lineup.methods)} methods swept{smaller}; not run: "
            f"{', '.join(left)} ({per_method}: "
            f"{len(left) * (preset.budget + preset.seeds - 1)} runs)")


def render(sweeps: list[Sweep], page: Path, command: str) -> str:
    """The leaderboard page written to ``page`` (links are relative to it), made by
    ``command``."""
    lines = ["# FGL leaderboard", "",
             f"Generated by `{command}` from the sweep folders below; do not edit by "
             "hand. One table per (dataset, protocol): every method tuned with the same trial "
             "budget on validation, its winner reported once on test.", ""]
    for sweep in sweeps:
        lines += section(sweep, page)
    if missing := uncovered(sweeps):
        lines += ["## Not yet covered", "", *missing]
    return "\n".join(lines).rstrip() + "\n"


def write(dirs: list[Path], page: Path) -> list[Sweep]:
    """Render the sweeps in ``dirs`` to ``page`` (the page names the command that made it);
    the sweeps it shows."""
    sweeps = read_sweeps(dirs)
    command = shlex.join(["graphfed", "leaderboard", *map(str, dirs), "--out", str(page)])
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(render(sweeps, page, command))
    return sweeps
