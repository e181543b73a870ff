"""``graphfed reproduce``: a paper's table, every cell run, ours beside the published numbers."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from graphfed.cli.common import console, errors, readable, split_ids


@readable
def reproduce(
    name: Annotated[str | None, typer.Argument(help="preset, e.g. fgfl-table2 (--list shows all)")
                    ] = None,
    methods: Annotated[str | None, typer.Option(help="comma-separated method ids")] = None,
    datasets: Annotated[str | None, typer.Option(help="comma-separated datasets")] = None,
    seeds: Annotated[int | None, typer.Option(
        "--seeds", "--repeats", min=1, help="number of seeds (0..N-1); for a preset with "
        "folds, the repeats of each fold")] = None,
    settings: Annotated[list[str] | None, typer.Option(
        "--settings", help="KEY=VALUE: keep the settings whose label has it (e.g. k=25, "
        "alpha=0.5); repeatable, a key given twice keeps either value")] = None,
    backbones: Annotated[str | None, typer.Option(
        help="comma-separated backbones to keep, e.g. gcn,sage (presets whose settings have a "
        "backbone; shorthand for --settings backbone=...)")] = None,
    folds: Annotated[int | None, typer.Option(min=1, help="run folds 0..N-1 only (presets "
                                              "with folds)")] = None,
    quick: Annotated[bool, typer.Option(help="fewer rounds and seeds")] = False,
    out: Annotated[Path | None, typer.Option(help="output directory (default "
                                             "runs/reproduce-NAME)")] = None,
    fairness_on: Annotated[str, typer.Option(help="test sets behind model-gradient fairness: "
                                             "local or global")] = "local",
    list_presets: Annotated[bool, typer.Option("--list", help="list the presets")] = False,
    quiet: Annotated[bool, typer.Option(help="no progress bars")] = False,
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="KEY=VALUE config override for every cell, after the preset's (e.g. "
        "rounds=100); repeatable, named in the table's title")] = None,
    select: Annotated[str | None, typer.Option(help="round each seed reports: final, max, "
        "best_last_10, min_val_loss, max_val_acc or max_val_roc_auc (default: the "
        "preset's)")] = None,
    jobs: Annotated[int, typer.Option(min=1, help="cells run in this many worker processes "
                                      "at once (sharing the cores and the GPU)")] = 1,
    ray: Annotated[str | None, typer.Option(
        "--ray", metavar="ADDRESS", help="run every seed as a task on this Ray cluster (auto: "
        "the one this machine runs); its nodes must see --out and GRAPHFED_DATA at the same "
        "paths")] = None,
) -> None:
    """Reproduce a paper's table: run every cell, write table.csv/table.md beside the paper's."""
    from graphfed.reproduce.catalog import load_presets
    from graphfed.reproduce.execute import Interrupted
    from graphfed.reproduce.runner import reproduce as run_preset
    from graphfed.reproduce.selection import tag
    from graphfed.reproduce.write import format_interval, format_ours

    if list_presets or name is None:
        for preset in load_presets().values():
            console.print(f"[bold]{preset.name}[/]: {preset.description}")
            console.print(f"  methods: {', '.join(v.method for v in preset.variants)}",
                          highlight=False, markup=False)
            console.print(f"  datasets: {', '.join(preset.datasets)}", highlight=False)
            if preset.folds:
                console.print(f"  folds: {preset.folds}, repeats: {preset.seeds}",
                              highlight=False)
        return
    filters = [*(settings or ()), *(f"backbone={b}" for b in split_ids(backbones) or ())]
    try:
        out_dir, rows, skipped = run_preset(
            name, split_ids(methods), split_ids(datasets), seeds, quick, out,
            progress=not quiet, fairness_on=fairness_on, overrides=tuple(set_ or ()),
            selector=select, jobs=jobs, settings=filters or None, folds=folds,
            ray_address=ray)
    except Interrupted as stop:  # one line, no traceback, the shell's code for SIGINT
        errors.print(escape(str(stop)), highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None
    table = Table(title=f"{name}: ours (mean ± std) beside the paper")
    for col in ("method", "dataset", "metric", "ours", "95 % CI", "seeds", "paper", "select"):
        table.add_column(col)
    for r in rows:
        table.add_row(escape(r["method"]), r["dataset"], r["metric"], format_ours(r),
                      format_interval(r), str(r.get("n_seeds", "")), r["paper"] or "",
                      tag(r["select"]))
    console.print(table)
    for reason in skipped:
        errors.print(f"[yellow]skipped[/] {reason}", highlight=False)
    console.print(f"tables: [bold]{out_dir / 'table.md'}[/], {out_dir / 'table.csv'}")
