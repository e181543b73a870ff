"""``graphfed datasets`` and ``graphfed partition``: what data there is, and how a config
splits it among clients."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from graphfed.cli.common import check_plot_path, console, fail, fmt, readable, split_args


def datasets() -> None:
    """List the datasets graphfed knows and whether their files are present."""
    from graphfed.data.datasets import SPECS, SYNTHETIC, data_root, missing_files

    root = data_root()
    table = Table(title=f"datasets (GRAPHFED_DATA={root or 'unset: downloads on first use'})")
    for col in ("name", "level", "PyG class", "status"):
        table.add_column(col)
    for name, spec in SPECS.items():
        if root is None:
            status = "download on use"
        else:
            status = "[green]present[/]" if not missing_files(name) else "[red]missing[/]"
        table.add_row(name, spec.level, spec.pyg_class, status)
    for name in SYNTHETIC:
        table.add_row(name, "node", "synthetic (CSBM)", "generated")
    console.print(table)


@readable
def partition(
    args: Annotated[list[str] | None, typer.Argument(help="CONFIG.yaml and key=value overrides")
                    ] = None,
    plot: Annotated[Path | None, typer.Option(help="save a label-distribution plot here")
                    ] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="print the heterogeneity card as JSON, the client rows under 'rows'")
                       ] = False,
    minority: Annotated[bool, typer.Option(
        "--minority", help="node level: also print each client's majority class, its majority "
        "and minority node counts and their node homophily (FedSpray's Table 1; --json rows "
        "always have them)")] = False,
) -> None:
    """Build (or reload) the federated data simulation of a config, describe each client and
    print the partition's heterogeneity card."""
    from graphfed.build import config_dataset, federated_data
    from graphfed.config import load_config
    from graphfed.data.heterogeneity import stored_card
    from graphfed.data.stats import client_stats, label_counts, plot_label_distribution

    if plot is not None:
        check_plot_path(plot)
    config_path, overrides = split_args(args or [])
    config = load_config(config_path, overrides)
    data = federated_data(config, config.run_seeds[0])
    if minority and data.level != "node":
        fail(f"--minority describes node-level clients; {data.dataset} is {data.level}-level")
    rows = client_stats(data)
    card = stored_card(data, config_dataset(config), config.features)
    shared = (None if data.global_test is None
              else label_counts(data.global_test, data.num_classes))  # a skewed one shows here
    public = (None if data.public is None
              else label_counts(data.public, data.num_classes))  # the server's own nodes
    if as_json:
        console.print_json(json.dumps({**card, "rows": rows}))
    else:
        unit = "graphs" if data.level == "graph" else "nodes"
        splits = "train/val/test edges" if data.level == "edge" else "train/val/test"
        table = Table(title=f"{data.dataset}: {data.num_clients} clients, partition "
                            f"{data.partition_id}")
        overlaps = [k for k in ("node_overlap", "link_overlap") if k in rows[0]]
        for col in ("client", unit, splits, "edges", "labels", "homophily",
                    "lost edges", *(k.replace("_", " ") for k in overlaps)):
            table.add_column(col, justify="right")
        for r in rows:
            table.add_row(str(r["client"]), str(r["samples"]),
                          f"{r['train']}/{r['val']}/{r['test']}", str(r["edges"]),
                          " ".join(str(c) for c in r["label_counts"]), fmt(r["homophily"]),
                          str(r["lost_edges"]), *(fmt(r[k]) for k in overlaps))
        console.print(table)
        if shared is not None:
            console.print(f"global test set: {sum(shared)} {unit}, labels "
                          f"{' '.join(map(str, shared))}")
        if public is not None:
            console.print(f"server's public pool: {sum(public)} {unit}, labels "
                          f"{' '.join(map(str, public))}")
        if overlaps:
            console.print("node/link overlap: a client's true mean share of its nodes/links "
                          "that each other client also holds (FairGFL Eqs. 8, 10)")
        if minority:
            console.print(_minority_table(rows))
        console.print(card_table([(data.partition_id, card)]))
    if plot is not None:
        plot_label_distribution(data, plot)
        console.print(f"plot: {plot}")


def _minority_table(rows: list[dict]) -> Table:
    """Each client's majority and minority nodes and their mean node homophily inside the
    client's graph (FedSpray Table 1: minority nodes mostly neighbour other classes)."""
    table = Table(title="majority and minority nodes per client (node homophily: share of a "
                        "node's neighbours in the client with its label)")
    for col in ("client", "majority class", "majority nodes", "minority nodes",
                "homophily majority", "homophily minority"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(str(r["client"]), str(r["majority_class"]), str(r["majority_nodes"]),
                      str(r["minority_nodes"]), fmt(r["majority_homophily"]),
                      fmt(r["minority_homophily"]))
    return table


def card_table(cards: list[tuple[str, dict | None]]) -> Table:
    """The named heterogeneity cards (``graphfed.data.heterogeneity``; None: a run that stored
    none) side by side, a row per measure, '-' where one does not apply."""
    from graphfed.data.heterogeneity import MEANINGS

    table = Table(title="heterogeneity of the partition")
    table.add_column("measure")
    for name, _ in cards:
        table.add_column(name, overflow="fold", justify="right")
    table.add_column("what it is", overflow="fold")
    for key, meaning in MEANINGS.items():
        values = [(card or {}).get(key) for _, card in cards]
        table.add_row(key, *(str(v) if isinstance(v, int) else fmt(v) for v in values), meaning)
    return table
