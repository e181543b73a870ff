"""What every command shares: the consoles, the one-line failure, argument splitting and number
formatting. Commands import their heavy modules inside the command, so ``graphfed --help`` and
light commands start without torch."""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from graphfed.errors import GraphfedError

console = Console()
errors = Console(stderr=True)


def command_group(**options: Any) -> typer.Typer:
    """A Typer app whose unexpected tracebacks leave out every frame's local variables: typer
    prints them by default, megabytes of tensors and configs (and whatever secrets a frame
    held) around the one line that matters."""
    return typer.Typer(pretty_exceptions_show_locals=False,
                       context_settings={"help_option_names": ["-h", "--help"]}, **options)


def fail(message: str) -> NoReturn:
    """Bad input: one readable line on stderr and exit code 2, never a traceback (a message
    that quotes a multi-line one, e.g. a library's, is folded onto one line)."""
    line = escape(" ".join(message.split()))
    errors.print(f"[bold red]error:[/] {line}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def readable(command: Callable[..., Any]) -> Callable[..., Any]:
    """A command whose ``GraphfedError`` becomes ``fail``'s one line, and so does an ``OSError``
    no layer below explained (a path given to it that is a file, missing or not writable)."""
    @functools.wraps(command)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except GraphfedError as e:
            fail(str(e))
        except OSError as e:
            fail(f"cannot use {e.filename}: {e.strerror}" if e.filename else str(e))
    return wrapper


def check_plot_path(path: Path) -> None:
    """Refuse a ``--plot`` target matplotlib cannot write, before any work is done: an unknown
    or missing extension, or a folder that is a file or not writable (a missing folder is made
    when the plot is saved)."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = FigureCanvasBase.get_supported_filetypes()
    if path.suffix.lower().lstrip(".") not in formats:
        fail(f"--plot {path}: the extension names the image format; use one of: "
             f"{', '.join(sorted(formats))}")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        reason = "is not a directory" if not folder.is_dir() else "is not writable"
        fail(f"--plot {path}: {folder} {reason}")


def split_ids(text: str | None) -> list[str] | None:
    """Comma-separated ids, a comma inside brackets kept: ``fairgfl[eps_v=1,eps_e=1],fedavg``
    is two ids (variant ids carry their overrides in brackets)."""
    if not text:
        return None
    return [t.strip() for t in re.split(r",(?![^\[\]]*\])", text) if t.strip()] or None


def split_args(args: list[str]) -> tuple[str | None, list[str]]:
    """``CONFIG key=value ...``: the config file is the first argument without ``=``."""
    if args and "=" not in args[0]:
        return args[0], args[1:]
    return None, args


def fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4f}"


def print_final(summary: dict) -> None:
    table = Table(title=f"{summary['algorithm']} on {summary['dataset']} "
                        f"({len(summary['seeds'])} seed(s), {summary['rounds']} rounds, "
                        f"{summary['seconds']:.1f}s)")
    table.add_column("metric")
    table.add_column("mean", justify="right")
    table.add_column("std over seeds", justify="right")
    for key, stats in summary["over_seeds"].items():
        table.add_row(key, fmt(stats["mean"]), fmt(stats["std"]))
    console.print(table)
