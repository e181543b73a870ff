"""``graphfed report``: finished runs side by side, and their accuracy-vs-round plot."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from graphfed.cli.common import check_plot_path, console, readable
from graphfed.cli.data import card_table

HEADERS = {"test_acc": "test acc", "global_test_acc": "global acc",
           "test_macro_f1": "macro-F1", "bytes_total": "MiB", "gradient_fairness": "fairness"}


def _cell(key: str, stats: tuple[float, float]) -> str:
    """A short cell: three decimals (MiB for bytes), '± std' only where seeds disagree."""
    mean, std = stats
    if key == "bytes_total":
        mean, std = mean / 2**20, std / 2**20
    digits = 1 if key == "bytes_total" else 3
    return f"{mean:.{digits}f}" + (f" ± {std:.{digits}f}" if std else "")


def privacy_table(rows: list[dict]) -> Table:
    """The privacy ledgers: per message its mechanism, noise multiplier, sampling rate,
    releases and epsilon, then the run's total (epsilon composed over every message)."""
    table = Table(title="privacy ledger (epsilon at delta; worst seed)")
    for col in ("run", "message", "mechanism"):
        table.add_column(col, overflow="fold")
    for col in ("sigma", "q", "releases", "rounds", "delta", "epsilon"):
        table.add_column(col, justify="right")
    for row in rows:
        sigma, q = row.get("noise_multiplier"), row.get("sampling_rate")
        epsilon = row["epsilon"]
        table.add_row(row["run"], row["message"], row["mechanism"],
                      "-" if sigma is None else f"{sigma:g}", "-" if q is None else f"{q:.3g}",
                      str(row["releases"]), str(row["rounds"]), f"{row['delta']:g}",
                      "unbounded" if epsilon is None else f"{epsilon:.3f}")
    return table


@readable
def report(
    run_dirs: Annotated[list[Path], typer.Argument(help="finished run directories")],
    plot: Annotated[Path | None, typer.Option(help="where to save the accuracy-vs-round plot "
                                                   "(default: report.png in the first run)")
                    ] = None,
    metric: Annotated[str | None, typer.Option(
        help="metric plotted against the round (default: test_acc, or global_test_acc where "
             "the clients hold no test split)")] = None,
) -> None:
    """Print a mean ± std table over seeds and the runs' heterogeneity cards (their first
    seed's partition), and save accuracy-vs-round plots."""
    from graphfed.report import (
        TABLE_METRICS,
        load_run,
        mean_curves,
        plot_curves,
        privacy_rows,
        summary_rows,
    )

    target = plot or Path(run_dirs[0]) / "report.png"
    check_plot_path(target)
    runs = [load_run(d) for d in run_dirs]
    rows = summary_rows(runs)
    metric, curves = mean_curves(runs, metric)
    table = Table(title="graphfed report (mean ± std over seeds)")
    table.add_column("run", overflow="fold")  # the whole name, wrapped: runs differ at the end
    for col in ("algorithm", "dataset", "seeds"):
        table.add_column(col, overflow="fold")
    for key in (*TABLE_METRICS, "gradient_fairness"):
        table.add_column(HEADERS.get(key, key), overflow="fold", justify="right")
    for row in rows:
        cells = [row["run"], row["algorithm"], row["dataset"], str(row["seeds"])]
        for key in TABLE_METRICS:
            cells.append(_cell(key, row[key]) if key in row else "-")
        fairness = row.get("gradient_fairness")
        cells.append("-" if fairness is None else f"{fairness:.3f}")
        table.add_row(*cells)
    console.print(table)
    if any(run.get("heterogeneity") for run in runs):
        console.print(card_table([(row["run"], run.get("heterogeneity"))
                                  for row, run in zip(rows, runs, strict=True)]))
    ledger = privacy_rows(runs)
    if ledger:
        console.print(privacy_table(ledger))
    for run, row in zip(runs, rows, strict=True):
        for seed, stop in run.get("stopped", {}).items():
            console.print(f"{row['run']} seed {seed}: {stop['reason']}")
    plot_curves(curves, sorted({run["dataset"] for run in runs}), target, metric)
    console.print(f"plot: {target}")
