"""``graphfed report``: finished runs side by side, and their accuracy-vs-round plot."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from graphfed.cli.common import console, fail, fmt
from graphfed.errors import GraphfedError


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
        fail(str(e))
    rows = summary_rows(runs)
    table = Table(title="graphfed report (mean ± std over seeds)")
    for col in ("run", "algorithm", "dataset", "seeds", *TABLE_METRICS, "gradient_fairness"):
        table.add_column(col)
    for row in rows:
        cells = [row["run"], row["algorithm"], row["dataset"], str(row["seeds"])]
        for key in TABLE_METRICS:
            cells.append(f"{fmt(row[key][0])} ± {fmt(row[key][1])}" if key in row else "-")
        cells.append(fmt(row.get("gradient_fairness")))
        table.add_row(*cells)
    console.print(table)
    target = plot or Path(run_dirs[0]) / "report.png"
    plot_curves(runs, target, metric)
    console.print(f"plot: {target}")
