"""The `graphfed` command line: run, reproduce, report, datasets, partition.

Bad input of any kind prints one readable line and exits with code 2, without a traceback.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from graphfed.errors import GraphfedError
from graphfed.runtime.flower.commands import federation

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Federated graph learning: simulate, run and compare FGL algorithms.")
console = Console()
errors = Console(stderr=True)


def _fail(message: str) -> None:
    errors.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _split_args(args: list[str]) -> tuple[str | None, list[str]]:
    """``CONFIG key=value ...``: the config file is the first argument without ``=``."""
    if args and "=" not in args[0]:
        return args[0], args[1:]
    return None, args


@app.command()
def run(
    args: Annotated[list[str] | None, typer.Argument(
        help="CONFIG.yaml followed by key=value overrides (e.g. rounds=50 fedprox.mu=0.1)")] = None,
    out: Annotated[Path, typer.Option(help="directory under which the run directory is made")
                   ] = Path("runs"),
    resume: Annotated[Path | None, typer.Option(help="continue the run in this directory")
                      ] = None,
    quiet: Annotated[bool, typer.Option(help="no progress bar")] = False,
) -> None:
    """Run a federated experiment and write its run directory (summary.json, metrics.jsonl)."""
    from graphfed.config import load_config
    from graphfed.experiment import resume_experiment, run_experiment
    from graphfed.runtime.base import RoundFailed

    try:
        if resume is not None:
            if args:
                _fail("--resume takes no config or overrides: the run's own config is used")
            run_dir, summary = resume_experiment(resume, progress=not quiet)
        else:
            config_path, overrides = _split_args(args or [])
            config = load_config(config_path, overrides)
            run_dir, summary = run_experiment(config, out, progress=not quiet)
    except GraphfedError as e:
        _fail(str(e))
    except RoundFailed as e:
        errors.print(f"[bold red]run stopped:[/] {e}; resume with --resume RUN_DIR once fixed",
                     highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    _print_final(summary)
    console.print(f"run directory: [bold]{run_dir}[/]")


def _print_final(summary: dict) -> None:
    table = Table(title=f"{summary['algorithm']} on {summary['dataset']} "
                        f"({len(summary['seeds'])} seed(s), {summary['rounds']} rounds, "
                        f"{summary['seconds']:.1f}s)")
    table.add_column("metric")
    table.add_column("mean", justify="right")
    table.add_column("std over seeds", justify="right")
    for key, stats in summary["over_seeds"].items():
        table.add_row(key, _fmt(stats["mean"]), _fmt(stats["std"]))
    console.print(table)


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4f}"


@app.command()
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="finished run directories")],
    plot: Annotated[Path | None, typer.Option(help="where to save the accuracy-vs-round plot "
                                                   "(default: report.png in the first run)")
                    ] = None,
    metric: Annotated[str, typer.Option(help="metric plotted against the round")] = "test_acc",
) -> None:
    """Print a mean ± std table over seeds and save accuracy-vs-round plots."""
    from graphfed.report import TABLE_METRICS, load_run, plot_curves, summary_rows

    try:
        runs = [load_run(d) for d in run_dirs]
    except GraphfedError as e:
        _fail(str(e))
    rows = summary_rows(runs)
    table = Table(title="graphfed report (mean ± std over seeds)")
    for col in ("run", "algorithm", "dataset", "seeds", *TABLE_METRICS, "gradient_fairness"):
        table.add_column(col)
    for row in rows:
        cells = [row["run"], row["algorithm"], row["dataset"], str(row["seeds"])]
        for key in TABLE_METRICS:
            cells.append(f"{_fmt(row[key][0])} ± {_fmt(row[key][1])}" if key in row else "-")
        cells.append(_fmt(row.get("gradient_fairness")))
        table.add_row(*cells)
    console.print(table)
    target = plot or Path(run_dirs[0]) / "report.png"
    plot_curves(runs, target, metric)
    console.print(f"plot: {target}")


@app.command()
def reproduce(
    name: Annotated[str | None, typer.Argument(help="preset, e.g. fgfl-table2 (--list shows all)")
                    ] = None,
    methods: Annotated[str | None, typer.Option(help="comma-separated method ids")] = None,
    datasets: Annotated[str | None, typer.Option(help="comma-separated datasets")] = None,
    seeds: Annotated[int | None, typer.Option(min=1, help="number of seeds (0..N-1)")] = None,
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
        "best_last_10 or min_val_loss (default: the preset's)")] = None,
) -> None:
    """Reproduce a paper's table: run every cell, write table.csv/table.md beside the paper's."""
    from graphfed.reproduce.preset import REGISTRY
    from graphfed.reproduce.runner import format_ours, get_preset
    from graphfed.reproduce.runner import reproduce as run_preset
    from graphfed.reproduce.selection import tag

    if list_presets or name is None:
        get_preset("fgfl-table2")  # registers the built-in presets
        for preset in REGISTRY.values():
            console.print(f"[bold]{preset.name}[/]: {preset.description}")
        return
    def split(text):
        return ([t.strip() for t in text.split(",") if t.strip()] if text else None)
    try:
        out_dir, rows, skipped = run_preset(name, split(methods), split(datasets), seeds, quick,
                                            out, progress=not quiet, fairness_on=fairness_on,
                                            overrides=tuple(set_ or ()), selector=select)
    except GraphfedError as e:
        _fail(str(e))
    table = Table(title=f"{name}: ours (mean ± std) beside the paper")
    for col in ("method", "dataset", "metric", "ours", "paper", "select"):
        table.add_column(col)
    for r in rows:
        table.add_row(escape(r["method"]), r["dataset"], r["metric"], format_ours(r),
                      r["paper"] or "", tag(r["select"]))
    console.print(table)
    for reason in skipped:
        errors.print(f"[yellow]skipped[/] {reason}", highlight=False)
    console.print(f"tables: [bold]{out_dir / 'table.md'}[/], {out_dir / 'table.csv'}")


@app.command()
def datasets() -> None:
    """List the datasets graphfed knows and whether their files are present."""
    from graphfed.data.datasets import SPECS, SYNTHETIC, data_root, missing_files

    root = data_root()
    table = Table(title=f"datasets (GRAPHFED_DATA={root or 'unset: downloads on first use'})")
    for col in ("name", "level", "PyG class", "status"):
        table.add_column(col)
    for name, spec in SPECS.items():
        if root is None:
            status = "download on use"
        else:
            status = "[green]present[/]" if not missing_files(name) else "[red]missing[/]"
        table.add_row(name, spec.level, spec.pyg_class, status)
    for name in SYNTHETIC:
        table.add_row(name, "node", "synthetic (CSBM)", "generated")
    console.print(table)


@app.command()
def partition(
    args: Annotated[list[str] | None, typer.Argument(help="CONFIG.yaml and key=value overrides")
                    ] = None,
    plot: Annotated[Path | None, typer.Option(help="save a label-distribution plot here")
                    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the rows as JSON")] = False,
) -> None:
    """Build (or reload) the federated data simulation of a config and describe each client."""
    from graphfed.config import load_config
    from graphfed.data.stats import client_stats, label_counts, plot_label_distribution
    from graphfed.experiment import federated_data

    try:
        config_path, overrides = _split_args(args or [])
        config = load_config(config_path, overrides)
        data = federated_data(config, config.run_seeds[0])
    except GraphfedError as e:
        _fail(str(e))
    rows = client_stats(data)
    shared = (None if data.global_test is None
              else label_counts(data.global_test, data.num_classes))  # a skewed one shows here
    if as_json:
        console.print_json(json.dumps({"partition_id": data.partition_id, "clients": rows,
                                       "global_test_label_counts": shared}))
    else:
        unit = "nodes" if data.level == "node" else "graphs"
        table = Table(title=f"{data.dataset}: {data.num_clients} clients, partition "
                            f"{data.partition_id}")
        for col in ("client", unit, "train/val/test", "edges", "labels", "homophily",
                    "lost edges"):
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(str(r["client"]), str(r["samples"]),
                          f"{r['train']}/{r['val']}/{r['test']}", str(r["edges"]),
                          " ".join(str(c) for c in r["label_counts"]), _fmt(r["homophily"]),
                          str(r["lost_edges"]))
        console.print(table)
        if shared is not None:
            console.print(f"global test set: {sum(shared)} {unit}, labels "
                          f"{' '.join(map(str, shared))}")
    if plot is not None:
        plot_label_distribution(data, plot)
        console.print(f"plot: {plot}")


app.add_typer(federation, name="federation")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
