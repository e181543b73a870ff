"""Figures of reproduced results, drawn from the table rows (so they show exactly the table)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.figure import Figure


def saved(fig: Figure, path: Path) -> Path:
    """``fig`` laid out tight and written to ``path`` at the pages' resolution, then closed."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def grouped_bars(rows: list[dict], path: Path, groups: Sequence[str], title: str) -> Path:
    """One bar group per method, one bar per quality group (``payoff_<group>`` rows)."""
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, ax = plt.subplots(figsize=(1.6 * len(methods) + 2, 3.6))
    width = 0.8 / len(groups)
    for j, group in enumerate(groups):
        means, stds = [], []
        for m in methods:
            row = next((r for r in rows if r["method"] == m
                        and r["metric"] == f"payoff_{group}"), None)
            means.append(row["ours_mean"] if row and row["ours_mean"] is not None else 0.0)
            stds.append(row["ours_std"] if row and row["ours_std"] is not None else 0.0)
        ax.bar([i + (j - (len(groups) - 1) / 2) * width for i in range(len(methods))], means,
               width, yerr=stds, label=group, capsize=2)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xticks(range(len(methods)), methods)
    ax.set_ylabel("payoff per round per agent")
    ax.set_title(title, fontsize=9)
    ax.legend(title="data quality", fontsize=8)
    return saved(fig, path)


def tradeoff_scatter(rows: list[dict], path: Path, title: str) -> Path:
    """Personalised accuracy against gradient fairness, one series per method over ``[beta=b]``
    variants, each point labelled with its beta."""
    points: dict[str, list[tuple[float, float, str]]] = {}
    for row in rows:
        match = re.fullmatch(r"(.+)\[beta=(.+)\]", row["method"])
        if not match or row["metric"] != "gradient_fairness" or row["ours_mean"] is None:
            continue
        acc = next((r["ours_mean"] for r in rows if r["method"] == row["method"]
                    and r["metric"] == "personalized_acc"), None)
        if acc is not None:
            points.setdefault(match[1], []).append((row["ours_mean"], acc, match[2]))
    fig, ax = plt.subplots(figsize=(5, 4))
    for method, pts in points.items():
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=method)
        for x, y, beta in pts:
            ax.annotate(beta, (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    ax.set_xlabel("model-gradient fairness (Pearson)")
    ax.set_ylabel("personalised accuracy")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    return saved(fig, path)


def f1_curves(rows: list[dict], out: Path) -> Path:
    """Client-averaged local and global micro-F1 per evaluated round, mean over seeds, one
    panel per dataset and test set (read from each cell's ``metrics.jsonl``)."""
    cells = list(dict.fromkeys((r["method"], r["dataset"]) for r in rows))
    datasets = list(dict.fromkeys(d for _, d in cells))
    fig, axes = plt.subplots(2, len(datasets), figsize=(4.5 * len(datasets), 6.4), squeeze=False)
    for col, dataset in enumerate(datasets):
        for method in (m for m, d in cells if d == dataset):
            runs = sorted((out / "runs" / f"{method}-{dataset}").glob("seed-*/metrics.jsonl"))
            for row, key in enumerate(("test_acc", "client_global_test_acc")):
                series: dict[int, list[float]] = {}
                for path in runs:
                    for line in map(json.loads, path.read_text().splitlines()):
                        if key in line:
                            series.setdefault(line["round"], []).append(line[key])
                if series:
                    rounds = sorted(series)
                    axes[row][col].plot(rounds, [sum(series[r]) / len(series[r])
                                                 for r in rounds], label=method, linewidth=1)
        for row, label in enumerate(("local", "global")):
            ax = axes[row][col]
            ax.set_title(f"{dataset}: {label} test", fontsize=9)
            ax.set_xlabel("round")
            ax.set_ylabel("micro-F1")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    path = out / "f1_curves.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def network_heatmap(network: Sequence[Sequence[float]], shares: Sequence[Sequence[float]],
                    names: Sequence[str], path: Path, title: str) -> Path:
    """A client network as a heat map beside each client's label distribution as a stacked
    bar, rows aligned, so blocks of like-labelled clients can be seen (cf. GPFL Fig. 5)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 5), width_ratios=(4, 1.3))
    image = left.imshow(network, cmap="viridis", aspect="auto")  # rows level with the bars
    fig.colorbar(image, ax=left, fraction=0.046, pad=0.04, label="mean network weight")
    left.set_xticks(range(len(names)), names, rotation=90, fontsize=6)
    left.set_yticks(range(len(names)), names, fontsize=6)
    left.set_xlabel("client")
    left.set_ylabel("client")
    start = [0.0] * len(names)
    for label in range(len(shares[0]) if shares else 0):
        widths = [row[label] for row in shares]
        right.barh(range(len(names)), widths, left=start, label=f"class {label}")
        start = [s + w for s, w in zip(start, widths, strict=True)]
    right.set_ylim(len(names) - 0.5, -0.5)  # row 0 on top, as in the heat map
    right.set_yticks([])
    right.set_xlabel("label share")
    right.legend(fontsize=7, loc="lower right")
    fig.suptitle(title, fontsize=9)
    return saved(fig, path)


Curve = list[tuple[float, float, float]]  # (x, mean, std) points of one series


def panel_curves(panels: dict[str, dict[str, Curve]], path: Path, xlabel: str, ylabel: str,
                 title: str, linthresh: float | None = None) -> Path:
    """One panel per key of ``panels``, one line with std error bars per series in it, the
    y axis shared so the panels compare at a glance; with ``linthresh``, a symlog x axis,
    linear below it, so x = 0 shows beside decades of x."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), sharey=True,
                             squeeze=False)
    for ax, (name, series) in zip(axes[0], panels.items(), strict=True):
        for label, points in series.items():
            xs, means, stds = zip(*sorted(points), strict=True)
            ax.errorbar(xs, means, yerr=stds, marker="o", capsize=2, label=label)
        if linthresh is not None:
            ax.set_xscale("symlog", linthresh=linthresh)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel(xlabel)
    axes[0][0].set_ylabel(ylabel)
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    return saved(fig, path)


def similarity_heatmaps(matrices: dict[str, Sequence[Sequence[float]]], path: Path,
                        title: str) -> Path:
    """Client x client similarity maps side by side on one [-1, 1] scale, so how far apart
    the clients look through each can be compared (cf. GPFL Fig. 3)."""
    fig, axes = plt.subplots(1, len(matrices), figsize=(4.4 * len(matrices), 4), squeeze=False)
    for ax, (name, matrix) in zip(axes[0], matrices.items(), strict=True):
        image = ax.imshow(matrix, cmap="RdBu_r", vmin=-1, vmax=1)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("client")
        ax.set_ylabel("client")
    fig.colorbar(image, ax=axes[0].tolist(), fraction=0.03, label="cosine similarity")
    fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def signed_heatmaps(matrices: dict[str, Sequence[Sequence[float]]], path: Path, title: str,
                    xlabel: str, ylabel: str, label: str) -> Path:
    """Row x column maps side by side on one scale symmetric about 0, red above and blue
    below (cf. FGFL Fig. 1's contributions), so where a sign flips stands out."""
    fig, axes = plt.subplots(len(matrices), 1, figsize=(9, 1.6 + 1.2 * len(matrices)),
                             squeeze=False, layout="constrained")
    top = max((abs(v) for m in matrices.values() for row in m for v in row if v == v),
              default=1.0) or 1.0
    for ax, (name, matrix) in zip(axes[:, 0], matrices.items(), strict=True):
        image = ax.imshow(matrix, cmap="RdBu_r", vmin=-top, vmax=top, aspect="auto",
                          interpolation="nearest",  # columns numbered from 1 (rounds)
                          extent=(0.5, len(matrix[0]) + 0.5, len(matrix) - 0.5, -0.5))
        ax.set_title(name, fontsize=9)
        ax.set_ylabel(ylabel)
        ax.set_yticks(range(len(matrix)))
    axes[-1, 0].set_xlabel(xlabel)
    fig.colorbar(image, ax=axes[:, 0].tolist(), fraction=0.03, label=label)
    fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path


def estimate_scatter(series: dict[str, tuple[list[float], list[float]]], path: Path,
                     title: str, xlabel: str, ylabel: str) -> Path:
    """One panel per series: estimated (y) against true (x) values, with the diagonal."""
    fig, axes = plt.subplots(1, len(series), figsize=(4 * len(series), 3.8), squeeze=False)
    for ax, (name, (true, estimated)) in zip(axes[0], series.items(), strict=True):
        ax.scatter(true, estimated, s=14)
        top = max([*true, *estimated, 1e-9])
        ax.plot([0, top], [0, top], color="grey", linewidth=0.7)
        ax.set_title(name, fontsize=9)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
    fig.suptitle(title, fontsize=9)
    return saved(fig, path)


def curve_panels(panels: dict[str, dict[str, tuple[list[int], list[float]]]], path: Path,
                 title: str) -> Path:
    """One panel per (metric, dataset) key, one line per method: a value over the rounds."""
    count = len(panels)
    columns = min(count, 4)
    rows = -(-count // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.4 * columns, 2.8 * rows), squeeze=False)
    for ax, (name, lines) in zip(axes.flat, panels.items(), strict=False):
        for method, (rounds, values) in lines.items():
            ax.plot(rounds, values, label=method, linewidth=1.2)
        ax.set_title(name, fontsize=8)
        ax.set_xlabel("round", fontsize=8)
    for ax in list(axes.flat)[count:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    return saved(fig, path)


def metric_bars(rows: list[dict], path: Path, metrics: Sequence[str], title: str) -> Path:
    """One panel per metric: a bar per (setting, method) row, with its std."""
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 3.6), squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        chosen = [r for r in rows if r["metric"] == metric and r["ours_mean"] is not None]
        ax.barh([f"{r['dataset']} {r['method']}" for r in chosen],
                [r["ours_mean"] for r in chosen], xerr=[r["ours_std"] for r in chosen],
                capsize=2)
        ax.set_title(metric, fontsize=9)
        ax.tick_params(axis="y", labelsize=6)
        ax.invert_yaxis()
    fig.suptitle(title, fontsize=9)
    return saved(fig, path)


def privacy_curve(rows: list[dict], path: Path, utility: str, title: str) -> Path:
    """``utility`` against the ledger's total ε (log scale), one point per method row that has
    both, with the std over seeds; a method without an ε (no noise) is a dashed line."""
    by_method: dict[str, dict[str, dict]] = {}
    for row in rows:
        if row["ours_mean"] is not None:
            by_method.setdefault(row["method"], {})[row["metric"]] = row
    fig, ax = plt.subplots(figsize=(5.2, 3.8))
    points = sorted((m["epsilon"]["ours_mean"], m[utility], method)
                    for method, m in by_method.items() if "epsilon" in m and utility in m)
    ax.errorbar([p[0] for p in points], [p[1]["ours_mean"] for p in points],
                yerr=[p[1]["ours_std"] for p in points], fmt="o-", capsize=3, label="DP-FedAvg")
    for eps, _, method in points:
        row = by_method[method][utility]
        ax.annotate(method, (eps, row["ours_mean"]), fontsize=6, xytext=(3, 3),
                    textcoords="offset points")
    for method, m in by_method.items():
        if "epsilon" not in m and utility in m:
            ax.axhline(m[utility]["ours_mean"], linestyle="--", color="grey", label=method)
    ax.set_xscale("log")
    ax.set_xlabel("ε (δ = 1e-5, whole run)")
    ax.set_ylabel(utility)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return saved(fig, path)
