"""The figures commands save (``graphfed report``, ``graphfed partition --plot``): drawn without
a display, laid out by matplotlib's constrained layout so no title, tick label or legend is
clipped, and with the legend outside the axes so it never hides what it names."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 120
CHARS_PER_INCH = 10  # of a title at matplotlib's default size, with room to spare


@contextmanager
def saved_figure(path: str | Path, width: float, height: float) -> Iterator[tuple[Figure, Axes]]:
    """A figure with one axes to draw on, saved to ``path`` (its folder made) when the block
    ends without an error, and closed either way (what it drew can still be read off it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    try:
        yield fig, ax
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=DPI)
    finally:
        plt.close(fig)


def title(fig: Figure, ax: Axes, text: str) -> None:
    """``text`` as the axes' title, wrapped to the figure's width instead of running off it
    (a legend beside the axes narrows them: pass such a figure a short title)."""
    width = int(fig.get_figwidth() * CHARS_PER_INCH)
    ax.set_title(textwrap.fill(text, width))


def legend_outside(fig: Figure, ax: Axes, heading: str, below: bool = False) -> None:
    """The axes' legend to its right (a column per 20 entries), or ``below`` it (three entries
    a row), where it takes the whole width for long labels."""
    entries = len(ax.get_legend_handles_labels()[1])
    if entries:
        fig.legend(loc="outside lower center" if below else "outside right upper",
                   title=heading, fontsize="small",
                   ncols=min(entries, 3) if below else -(-entries // 20))
