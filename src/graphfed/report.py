"""Summaries of finished runs: a mean ± std table and accuracy-vs-round plots."""

from __future__ import annotations

import json
from pathlib import Path

from graphfed.errors import GraphfedError
from graphfed.metrics import pearson

TABLE_METRICS = ("test_acc", "global_test_acc", "test_macro_f1", "bytes_total")


def load_run(run_dir: str | Path) -> dict:
    path = Path(run_dir) / "summary.json"
    if not path.is_file():
        raise GraphfedError(f"'{run_dir}' has no summary.json (not a finished graphfed run)")
    summary = json.loads(path.read_text())
    summary["run_dir"] = str(run_dir)
    return summary


def _seed_client_accs(run_dir: str, seed: int) -> list[float]:
    summary = json.loads((Path(run_dir) / f"seed-{seed}" / "summary.json").read_text())
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


def plot_curves(runs: list[dict], path: str | Path, metric: str = "test_acc") -> None:
    """Mean over seeds of ``metric`` against the round, one line per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    for run in runs:
        curves = []
        for seed in run["seeds"]:
            lines = (Path(run["run_dir"]) / f"seed-{seed}" / "metrics.jsonl").read_text()
            points = [json.loads(x) for x in lines.splitlines() if x.strip()]
            curves.append({p["round"]: p[metric] for p in points if metric in p})
        rounds = sorted(set.intersection(*(set(c) for c in curves)))
        if rounds:
            means = [sum(c[r] for c in curves) / len(curves) for r in rounds]
            ax.plot(rounds, means, label=f"{Path(run['run_dir']).name}")
    datasets = sorted({run["dataset"] for run in runs})
    ax.set_title(f"{metric} by round on {', '.join(datasets)} (mean over seeds)")
    ax.set_xlabel("round")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
