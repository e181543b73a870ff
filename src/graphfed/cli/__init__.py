"""The ``graphfed`` command line: run, reproduce, report, datasets, partition, algorithms,
``config show`` and ``federation`` (a real federation on Flower).

Bad input of any kind prints one readable line and exits with code 2, without a traceback; an
unexpected error's traceback shows no local variables.
"""

from __future__ import annotations

from graphfed.allocator import keep_freed_memory
from graphfed.cli.algorithms import algorithms
from graphfed.cli.common import command_group
from graphfed.cli.config import config
from graphfed.cli.data import datasets, partition
from graphfed.cli.federation import federation
from graphfed.cli.report import report
from graphfed.cli.reproduce import reproduce
from graphfed.cli.run import run

app = command_group(add_completion=False, no_args_is_help=True,
                    help="Federated graph learning: simulate, run and compare FGL algorithms.")
for command in (run, reproduce, report, datasets, partition, algorithms):
    app.command()(command)
app.add_typer(config, name="config")
app.add_typer(federation, name="federation")


def main() -> None:
    keep_freed_memory()
    app()


if __name__ == "__main__":
    main()
