"""``graphfed leaderboard``: finished sweep folders rendered as one Markdown page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from graphfed.cli.common import console, fail, readable


@readable
def leaderboard(
    dirs: Annotated[list[Path] | None, typer.Argument(
        metavar="DIR...", help="finished sweep folders (graphfed sweep --out), or a folder of "
        "them (graphfed sweep --preset ... --out)")] = None,
    out: Annotated[Path | None, typer.Option(help="the Markdown page to write, e.g. "
                                             "docs/leaderboard.md")] = None,
) -> None:
    """Render finished sweeps as a leaderboard page: a ranked table per (dataset, protocol)
    with intervals, its budget and selection rule, the partition's heterogeneity card and
    links to the winning configs."""
    if not dirs:
        fail("name at least one finished sweep folder: graphfed leaderboard DIR... --out FILE.md")
    if out is None:
        fail("--out FILE.md is required: the page to write")
    from graphfed.sweep.leaderboard import write

    sweeps = write(dirs, out)
    console.print(f"leaderboard: [bold]{out}[/] ({len(sweeps)} table"
                  f"{'s' * (len(sweeps) != 1)})", highlight=False)
