"""``graphfed algorithms``: every registered algorithm, its family, task levels and paper."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from graphfed.cli.common import console


def algorithms(
    as_json: Annotated[bool, typer.Option("--json", help="a JSON list of objects with name, "
                                          "aliases, family, levels, paper, batched (trains on "
                                          "engine=batched) and modes (the option modes the "
                                          "conformance test also runs)")] = False,
    markdown: Annotated[bool, typer.Option("--markdown", help="the table the README and the "
                                           "docs show (make status writes it there)")] = False,
) -> None:
    """List the registered algorithms: name, aliases, family, task levels, paper."""
    from graphfed.algorithms.registry import catalogue, markdown_table

    rows = catalogue()
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
