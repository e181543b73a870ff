"""``graphfed run``: one experiment, or the continuation of an interrupted one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from graphfed.cli.common import console, errors, fail, print_final, readable, split_args


@readable
def run(
    args: Annotated[list[str] | None, typer.Argument(
        metavar="[CONFIG.yaml] [KEY=VALUE]...",
        help="CONFIG.yaml followed by key=value overrides (e.g. rounds=50 fedprox.mu=0.1)")] = None,
    out: Annotated[Path, typer.Option(help="directory under which the run directory is made")
                   ] = Path("runs"),
    resume: Annotated[Path | None, typer.Option(help="continue the run in this directory")
                      ] = None,
    quiet: Annotated[bool, typer.Option(help="no progress bar")] = False,
    log: Annotated[list[str] | None, typer.Option(
        metavar="TRACKER", help="also stream each seed's rounds, config and summary to "
        "tensorboard and/or mlflow (repeat it or give a comma list; added to the config's "
        "log.trackers)")] = None,
) -> None:
    """Run a federated experiment and write its run directory (summary.json, metrics.jsonl).

    A round every client fails stops the run: with a checkpoint to continue from it says so
    (exit code 1); with none, the run failed outright and a resume cannot help (exit code 2)."""
    from graphfed.config_file import precheck
    from graphfed.trackers import require

    trackers = _trackers(log or [])
    if resume is None:  # a typo or a bad number fails before torch and PyG load
        precheck(*split_args(args or []))
    from graphfed.config import load_config
    from graphfed.experiment import RunFailed, RunInterrupted
    from graphfed.launch import resume as resume_run
    from graphfed.launch import run as launch_run
    from graphfed.runtime.base import RoundFailed

    try:
        if resume is not None:
            if args or trackers:
                fail("--resume takes no config, overrides or --log: the run's own config is "
                     "used")
            if (resume / "summary.json").is_file():
                console.print(f"{resume} is finished (its summary.json is written); nothing to "
                              "resume", highlight=False)
                return
            run_dir, summary = resume_run(resume, progress=not quiet)
        else:
            config_path, overrides = split_args(args or [])
            config = load_config(config_path, overrides)
            if trackers:
                merged = json.dumps([*config.log.trackers, *trackers])
                config = load_config(config_path, [*overrides, f"log.trackers={merged}"])
            require(config.log.trackers)
            run_dir, summary = launch_run(config, out, progress=not quiet)
    except RunInterrupted as e:  # one line saying how to continue, the shell's code for SIGINT
        errors.print(str(e), highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None
    except RoundFailed as e:  # RunFailed, or a Flower deployment's own
        if isinstance(e, RunFailed) and not e.resumable:
            fail(str(e))
        errors.print(f"[bold red]run stopped:[/] {escape(' '.join(str(e).split()))}",
                     highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None
    print_final(summary)
    console.print(f"run directory: [bold]{run_dir}[/]")


def _trackers(values: list[str]) -> list[str]:
    """The trackers ``--log`` names (repeated or comma-separated), each one known."""
    from graphfed.trackers import NEEDS

    names = [name.strip() for value in values for name in value.split(",") if name.strip()]
    for name in names:
        if name not in NEEDS:
            fail(f"--log {name}: unknown tracker; choose from {', '.join(NEEDS)}")
    return names
