"""``graphfed config show CONFIG``: every key of a config with its value, its default and what it
means, so valid keys are read here rather than learnt from error messages."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from pydantic import BaseModel
from rich.markup import escape
from rich.table import Table

from graphfed.cli.common import command_group, console, readable, split_args

config = command_group(no_args_is_help=True, help="Inspect experiment configs.")


def _rows(model: BaseModel, prefix: str = "") -> list[tuple[str, Any, Any, str]]:
    """(dotted key, value, default, description) of every field, nested sections flattened."""
    rows = []
    for name, field in type(model).model_fields.items():
        value = getattr(model, name)
        key = f"{prefix}{name}"
        if isinstance(value, BaseModel):
            rows += _rows(value, f"{key}.")
            continue
        default = field.get_default(call_default_factory=True)
        rows.append((key, value, default, field.description or ""))
    return rows


@config.command()
@readable
def show(
    args: Annotated[list[str] | None, typer.Argument(help="CONFIG.yaml and key=value overrides "
                                                     "(none: the defaults)")] = None,
) -> None:
    """Print every key of the resolved config: value, default and description."""
    from graphfed.config import load_config

    config_path, overrides = split_args(args or [])
    resolved = load_config(config_path, overrides)
    rows = _rows(resolved)
    rows = [r for r in rows if r[0] != "methods"]
    rows += _rows(resolved.algorithm_options(), f"{resolved.algorithm}.")
    table = Table(title=f"{config_path or 'defaults'}: {resolved.algorithm} on {resolved.dataset}")
    for col in ("key", "value", "default", "description"):
        table.add_column(col, overflow="fold")
    for key, value, default, description in rows:
        changed = value != default  # keys the config sets away from the default are bold
        table.add_row(f"[bold]{key}[/]" if changed else key, escape(str(value)),
                      escape(str(default)), escape(description))
    console.print(table)
