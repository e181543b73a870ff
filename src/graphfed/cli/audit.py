"""``graphfed audit``: attacks on what a finished run released, one row per attack."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from graphfed.cli.common import check_plot_path, console, errors, readable, split_ids


@readable
def audit(
    run_dir: Annotated[Path, typer.Argument(help="a finished run directory")],
    attack: Annotated[list[str] | None, typer.Option(
        metavar="ATTACK", help="mia (loss threshold), lira (offline LiRA) or link (link "
        "stealing, node level); repeat it or give a comma list (default: all that apply)")
    ] = None,
    seed: Annotated[int | None, typer.Option(help="the run's seed to audit (default: its "
                                                  "first)")] = None,
    shadows: Annotated[int, typer.Option(help="LiRA's shadow federations (cached in the "
                                              "seed's audit/ folder)")] = 4,
    plot: Annotated[Path | None, typer.Option(help="save the attacks' ROC curves here")
                    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the results as JSON")
                       ] = False,
) -> None:
    """Attack the model a finished run released and print each attack's ROC-AUC and TPR at
    1 % FPR with its threat model; the seed's audit/audit.json keeps them."""
    if plot is not None:
        check_plot_path(plot)
    from graphfed.audit import RELEASED, audit_run, plot_roc

    names = [n for value in attack or [] for n in split_ids(value) or []]
    result = audit_run(run_dir, names, seed, shadows,
                       lambda line: errors.print(line, highlight=False))
    if plot is not None:
        plot_roc(result, plot)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2))
        return
    table = Table(title=f"graphfed audit of {escape(str(run_dir))} seed {result.seed}: attacks on "
                        f"{RELEASED[result.released]}")
    for col in ("attack", "auc", "tpr_at_1pct_fpr", "members/non-members"):
        table.add_column(col, justify="left" if col == "attack" else "right")
    for r in result.results:
        table.add_row(r.attack, f"{r.auc:.4f}", f"{r.tpr_at_1pct_fpr:.4f}",
                      f"{r.members}/{r.non_members}")
    console.print(table)
    console.print("threat models (what each attacker is given):")
    for r in result.results:  # a line each: too long for a table cell
        console.print(f"  {r.attack}: {r.threat_model}", highlight=False)
    console.print(escape(f"written: {result.path}" + (f"; plot: {plot}" if plot else "")),
                  highlight=False)
