"""``graphfed sweep``: an equal-budget search per method, selected on validation, the winner
reported once on test over seeds."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from graphfed.cli.common import console, errors, fail, readable, split_args, split_ids

if TYPE_CHECKING:
    from graphfed.sweep.preset import SweepPreset
    from graphfed.sweep.runner import Request


@readable
def sweep(
    args: Annotated[list[str] | None, typer.Argument(
        metavar="[CONFIG.yaml] [KEY=VALUE]...", help="the config every trial starts from, "
        "then key=value overrides (e.g. rounds=50); with --preset, overrides only")] = None,
    methods: Annotated[str | None, typer.Option(help="comma-separated algorithms, e.g. "
                                                "fedavg,fedprox,local (with --preset: a "
                                                "subset of its methods, default all)")] = None,
    budget: Annotated[int | None, typer.Option(help="trials per method (every method gets "
                                               "exactly this many; a preset states its own)")
                      ] = None,
    seeds: Annotated[int | None, typer.Option(help="seeds 0..S-1 the winner is re-run on "
                                              "(default 3, or the preset's)")] = None,
    sampler: Annotated[str, typer.Option(help="grid (the first N points of a seeded shuffle "
                                         "of the full grid) or tpe (Optuna's TPE, seed 0)")
                       ] = "grid",
    objective: Annotated[str, typer.Option(help="val_acc: best validation accuracy of any "
                                           "round; val_loss: lowest pooled validation loss")
                         ] = "val_acc",
    jobs: Annotated[int, typer.Option(help="runs trained in this many worker processes at "
                                      "once")] = 1,
    storage: Annotated[str | None, typer.Option(help="Optuna storage URL (default "
                                                "sqlite:///OUT/study.db)")] = None,
    ray: Annotated[str | None, typer.Option(
        "--ray", metavar="ADDRESS", help="train every run as a task on this Ray cluster "
        "(auto: the one this machine runs), as reproduce --ray")] = None,
    preset: Annotated[str | None, typer.Option(help="a sweep preset (fgl-standard): its "
                                               "protocol on each of its datasets, a sweep "
                                               "folder each under --out")] = None,
    datasets: Annotated[str | None, typer.Option(help="with --preset: comma-separated "
                                                 "datasets of the preset (default all)")
                        ] = None,
    out: Annotated[Path | None, typer.Option(help="output directory (default "
                                             "runs/sweep-NAME)")] = None,
    quiet: Annotated[bool, typer.Option(help="no progress lines")] = False,
) -> None:
    """Tune every method with the same trial budget on validation, then report each winner once
    on test: table.csv/table.md, best/METHOD.yaml, sweep.json, the Optuna study (resumable)."""
    from graphfed.config_file import precheck
    from graphfed.sweep.runner import Request

    config_path, overrides = split_args(args or [])
    setup = None
    if preset is not None:
        from graphfed.sweep.preset import get_preset

        setup = get_preset(preset)
        budget = setup.budget if budget is None else budget
        seeds = setup.seeds if seeds is None else seeds
    elif datasets is not None:
        fail("--datasets chooses among a preset's datasets: give --preset, or dataset=NAME")
    if budget is None:
        fail("--budget N is required: the trials every method gets")
    request = Request(config_path, tuple(overrides), tuple(split_ids(methods) or ()), budget,
                      3 if seeds is None else seeds, sampler, objective, jobs, storage, ray)
    if setup is not None:
        _preset(setup, request, split_ids(datasets), out, quiet)
        return
    precheck(config_path, overrides)  # a typo or a bad number fails before torch loads
    folder = out or Path("runs") / f"sweep-{Path(config_path or 'defaults').stem}"
    _show(_run(request, folder, quiet), folder)


def _preset(setup: SweepPreset, request: Request, datasets: list[str] | None, out: Path | None,
            quiet: bool) -> None:
    """Sweep ``setup`` on each chosen dataset into ``OUT/<dataset>-<protocol>``."""
    from graphfed.sweep.preset import plan

    root = out or Path("runs") / f"sweep-{setup.name}"
    for one in plan(setup, request, datasets):
        _show(_run(one.request, root / one.folder, quiet, one.context), root / one.folder)


def _run(request: Request, folder: Path, quiet: bool, context: dict | None = None
         ) -> list[dict]:
    from graphfed.reproduce.execute import Interrupted
    from graphfed.sweep.runner import sweep as run_sweep

    try:
        return run_sweep(request, folder, progress=not quiet, context=context)
    except Interrupted as stop:  # one line, no traceback, the shell's code for SIGINT
        errors.print(escape(str(stop)), highlight=False, soft_wrap=True)
        raise typer.Exit(130) from None


def _show(rows: list[dict], folder: Path) -> None:
    from graphfed.reproduce.write import format_interval, format_ours

    table = Table(title=f"sweep {folder.name}: {rows[0]['trials']} trials per method, winners "
                        "on test")
    for col in ("method", "dataset", "metric", "test", "95 % CI", "seeds", "trials"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["method"], r["dataset"], r["metric"], format_ours(r),
                      format_interval(r), str(r["n_seeds"]), str(r["trials"]))
    console.print(table)
    console.print(f"tables: [bold]{folder / 'table.md'}[/], {folder / 'table.csv'}; configs: "
                  f"{folder / 'best'}", highlight=False)
