"""``graphfed algorithms``: every registered algorithm, its family, task levels and paper."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from graphfed.cli.common import console


def markdown_table(rows: list[dict]) -> str:
    """The rows as the one-line-per-algorithm table of the README and the docs."""
    lines = ["| name | family | levels | paper |", "|---|---|---|---|"]
    for row in rows:
        names = f"`{row['name']}`" + "".join(f" (`{a}`)" for a in row["aliases"])
        lines.append(f"| {names} | {row['family']} | {', '.join(row['levels'])} | "
                     f"{row['paper']} |")
    return "\n".join(lines)


def algorithms(
    as_json: Annotated[bool, typer.Option("--json", help="a JSON list of objects with name, "
                                          "aliases, family, levels, paper, batched")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="the table the README and the "
                                           "docs show")] = False,
) -> None:
    """List the registered algorithms: name, aliases, family, task levels, paper."""
    from graphfed.algorithms.registry import load_all

    rows = [{"name": a.name, "aliases": list(a.aliases), "family": a.family,
             "levels": list(a.levels), "paper": a.paper, "batched": a.batched}
            for a in sorted(load_all().values(), key=lambda a: (a.family, a.name))]
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
        return
    if markdown:
        typer.echo(markdown_table(rows))
        return
    table = Table(title=f"{len(rows)} algorithms")
    for col in ("name", "aliases", "family", "levels", "paper"):
        table.add_column(col)
    for row in rows:
        table.add_row(row["name"], ", ".join(row["aliases"]), row["family"],
                      "/".join(row["levels"]), row["paper"])
    console.print(table)
