"""The ``graphfed`` command line: run, reproduce, sweep, leaderboard, report, audit, datasets,
partition, algorithms, ``config show`` and ``federation`` (a real federation on Flower).

Bad input of any kind prints one readable line and exits with code 2, without a traceback; an
unexpected error's traceback shows no local variables.
"""

from __future__ import annotations

from typing import Annotated

import typer

from graphfed.allocator import keep_freed_memory
from graphfed.cli.algorithms import algorithms
from graphfed.cli.audit import audit
from graphfed.cli.common import command_group
from graphfed.cli.config import config
from graphfed.cli.data import datasets, partition
from graphfed.cli.federation import federation
from graphfed.cli.leaderboard import leaderboard
from graphfed.cli.report import report
from graphfed.cli.reproduce import reproduce
from graphfed.cli.run import run
from graphfed.cli.sweep import sweep

RUN_EXAMPLES = """Examples:

  graphfed run configs/quickstart.yaml

  graphfed run configs/quickstart.yaml algorithm=fedprox fedprox.mu=0.01 rounds=50

  graphfed run dataset=CiteSeer num_clients=5   (no file: every other key at its default)

  graphfed run --resume runs/quickstart

Every key, its default and meaning: graphfed config show CONFIG.yaml"""

app = command_group(add_completion=False, no_args_is_help=True,
                    help="Federated graph learning: simulate, run and compare FGL algorithms.")
# a bare `graphfed run` prints its usage: training on every default is never what was meant
app.command(no_args_is_help=True, epilog=RUN_EXAMPLES)(run)
for command in (reproduce, sweep, leaderboard, report, audit, datasets, partition,
                algorithms):
    app.command()(command)
app.add_typer(config, name="config")
app.add_typer(federation, name="federation")


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version

        typer.echo(f"graphfed {version('graphfed')}")
        raise typer.Exit()


@app.callback()
def _options(version: Annotated[bool, typer.Option(
        "--version", is_eager=True, callback=_version, help="print the version and exit")
        ] = False) -> None:
    """Federated graph learning: simulate, run and compare FGL algorithms."""


def main() -> None:
    keep_freed_memory()
    app()


if __name__ == "__main__":
    main()
