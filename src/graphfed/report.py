"""Summaries of finished runs: a mean ± std table and accuracy-vs-round plots."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from graphfed.data.heterogeneity import is_card
from graphfed.errors import GraphfedError
from graphfed.metrics import mean_std, pearson
from graphfed.plotting import legend_outside, saved_figure, title
from graphfed.serialization import read_json, read_metrics

if TYPE_CHECKING:
    from matplotlib.figure import Figure

TABLE_METRICS = ("test_acc", "global_test_acc", "test_macro_f1", "bytes_total")
DEFAULT_CURVES = ("test_acc", "global_test_acc")  # the first a run records is plotted
RUN_SUMMARY_KEYS = ("algorithm", "dataset", "seeds", "over_seeds", "partition_ids")


def load_run(run_dir: str | Path) -> dict:
    """A finished run's top-level summary (with ``run_dir``), refused when damaged."""
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        raise GraphfedError(f"'{run_dir}' has no summary.json (not a finished graphfed run)")
    summary = read_json(path, "run summary", RUN_SUMMARY_KEYS)
    card = summary.get("heterogeneity")
    if card is not None and not is_card(card):
        raise GraphfedError(f"{path} is damaged: its heterogeneity is not a heterogeneity card")
    summary["run_dir"] = str(run_dir)
    return summary


def _seed_client_accs(run_dir: str, seed: int) -> list[float]:
    summary = read_json(Path(run_dir) / f"seed-{seed}" / "summary.json", "seed summary",
                        ("clients",))
    return [c["test_acc"] for c in summary["clients"]]


def gradient_fairness(local_run: dict, run: dict) -> float | None:
    """Pearson correlation of per-client accuracies of a Local run and a federated run on the
    same partitions, averaged over shared seeds (None if they share none)."""
    shared = [s for s in run["seeds"] if s in local_run["seeds"]
              and run["partition_ids"].get(str(s)) == local_run["partition_ids"].get(str(s))]
    if not shared:
        return None
    values = [pearson(_seed_client_accs(local_run["run_dir"], s),
                      _seed_client_accs(run["run_dir"], s)) for s in shared]
    return sum(values) / len(values)


def summary_rows(runs: list[dict]) -> list[dict]:
    local = next((r for r in runs if r["algorithm"] == "local"), None)
    rows = []
    for run in runs:
        row = {"run": Path(run["run_dir"]).name, "algorithm": run["algorithm"],
               "dataset": run["dataset"], "seeds": len(run["seeds"])}
        for key in TABLE_METRICS:
            if key in run["over_seeds"]:
                row[key] = (run["over_seeds"][key]["mean"], run["over_seeds"][key]["std"])
        if local is not None and run is not local:
            row["gradient_fairness"] = gradient_fairness(local, run)
        rows.append(row)
    return rows


def privacy_rows(runs: list[dict]) -> list[dict]:
    """The privacy ledgers of the runs that released noise: a row per message and one for the
    total (``message`` "total"), each with the run, its delta and epsilon (None: unbounded)."""
    rows = []
    for run in runs:
        ledger = run.get("privacy")
        if not ledger:
            continue
        head = {"run": Path(run["run_dir"]).name, "delta": ledger["delta"]}
        for message, entry in ledger["by_message"].items():
            rows.append({**head, "message": message, **entry})
        rows.append({**head, "message": "total", "mechanism": ledger["accountant"],
                     "releases": sum(e["releases"] for e in ledger["by_message"].values()),
                     "rounds": len(ledger["by_round"]), "epsilon": ledger["epsilon"]})
    return rows


@dataclass(frozen=True)
class Curve:
    """One run's ``metric`` at every round all its seeds evaluated: the mean over the seeds and
    their (population) standard deviation."""

    run: str
    seeds: int
    rounds: list[int]
    means: list[float]
    stds: list[float]


def _curves(runs: list[dict], metric: str) -> tuple[list[Curve], set[str]]:
    """Per run, ``metric``'s curve over its seeds; and every numeric key the runs record."""
    out: list[Curve] = []
    recorded: set[str] = set()
    for run in runs:
        curves = []
        for seed in run["seeds"]:
            points = read_metrics(Path(run["run_dir"]) / f"seed-{seed}" / "metrics.jsonl")
            recorded.update(k for p in points for k, v in p.items()
                            if isinstance(v, (int, float)) and k != "round")
            curves.append({p["round"]: p[metric] for p in points
                           if isinstance(p.get(metric), (int, float))})
        rounds = sorted(set.intersection(*(set(c) for c in curves)))
        stats = [mean_std([c[r] for c in curves]) for r in rounds]
        out.append(Curve(Path(run["run_dir"]).name, len(curves), rounds,
                         [m for m, _ in stats], [s for _, s in stats]))
    return out, recorded


def mean_curves(runs: list[dict], metric: str | None = None) -> tuple[str, list[Curve]]:
    """The metric plotted and its curve per run. Without ``metric``: the clients' test
    accuracy, or the global test's where no client holds a test split (FairGFL's partition
    trains on every client node). A metric no run records is refused, naming the ones they
    do."""
    for name in (metric,) if metric else DEFAULT_CURVES:
        out, recorded = _curves(runs, name)
        if any(curve.rounds for curve in out):
            return name, out
    raise GraphfedError(f"--metric {metric or DEFAULT_CURVES[0]}: no round of these runs "
                        f"records it as a number; numbers recorded: "
                        f"{', '.join(sorted(recorded))}")


def plot_curves(curves: list[Curve], datasets: list[str], path: str | Path,
                metric: str = "test_acc") -> Figure:
    """``mean_curves``'s lines, one per run, each in a band of ± its seeds' standard deviation
    (a run of one seed has none), saved to ``path``; the figure (closed) is returned."""
    with saved_figure(path, 8, 4.8) as (fig, ax):
        for curve in (c for c in curves if c.rounds):
            seeds = f"{curve.seeds} seed{'s' * (curve.seeds != 1)}"
            (line,) = ax.plot(curve.rounds, curve.means, label=f"{curve.run} ({seeds})")
            if curve.seeds > 1:
                ax.fill_between(curve.rounds,
                                [m - s for m, s in zip(curve.means, curve.stds, strict=True)],
                                [m + s for m, s in zip(curve.means, curve.stds, strict=True)],
                                color=line.get_color(), alpha=0.2, linewidth=0)
        title(fig, ax, f"{metric} by round on {', '.join(datasets)} (mean over seeds, "
                       "band ± std)")
        ax.set_xlabel("round")
        ax.set_ylabel(metric)
        ax.grid(alpha=0.3)
        legend_outside(fig, ax, "run", below=True)
    return fig
