"""Robust aggregation under attack: final test accuracy of each aggregation rule as the share of
attacking clients grows, one run per (rule, fraction, seed), on a config (the quickstart's
Cora/FedAvg by default). Writes ``results.json``, ``results.csv`` and ``robust_aggregation.png``
(accuracy vs fraction of attackers, one line per rule) to ``--out``; the runs themselves go to
``--out``/runs.

    GRAPHFED_DATA=../shared/datasets python benchmarks/robust_aggregation.py \
        [--rules mean,median,trimmed_mean,krum,multi_krum,norm_clip] [--fractions 0,0.1,0.2,0.3] \
        [--kind sign_flip] [--scale 4] [--rounds 100] [--seeds 0] [--set partition=uniform] \
        [--out runs/robust]
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path
from typing import get_args

from graphfed.config import load_config
from graphfed.experiment import run_experiment
from graphfed.mechanisms.attacks import AttackKind
from graphfed.mechanisms.robust import Rule
from graphfed.metrics import mean_std


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


def run_cell(options: argparse.Namespace, rule: str, fraction: float) -> dict:
    """One (rule, fraction) cell over the seeds: final test accuracy, mean and std."""
    overrides = [f"aggregation.rule={rule}", f"attack.fraction={fraction}",
                 f"attack.kind={options.kind}", f"seeds={options.seeds}",
                 f"name={rule}-{fraction:g}", "checkpoint_every=0", f"device={options.device}"]
    overrides += options.set
    if options.scale is not None:
        overrides.append(f"attack.scale={options.scale}")
    if options.rounds is not None:  # evaluated once, after the last round
        overrides += [f"rounds={options.rounds}", f"eval_every={options.rounds}"]
    config = load_config(options.config, overrides)
    start = time.perf_counter()
    run_dir, summary = run_experiment(config, Path(options.out) / "runs", progress=False)
    accuracy = summary["over_seeds"]["test_acc"]
    honest, honest_std = mean_std([honest_accuracy(run_dir / f"seed-{seed}" / "summary.json")
                                   for seed in summary["seeds"]])
    return {"rule": rule, "fraction": fraction, "kind": options.kind,
            "scale": config.attack.factor, "rounds": config.rounds,
            "seeds": summary["seeds"], "test_acc": accuracy["mean"],
            "test_acc_std": accuracy["std"], "honest_test_acc": honest,
            "honest_test_acc_std": honest_std, "seconds": time.perf_counter() - start,
            "run_dir": str(run_dir)}


def honest_accuracy(seed_summary: Path) -> float:
    """Mean test accuracy over the clients that did not attack: what the attackers' own test
    sets (communities the federation never learns from a robust rule) do not drag down."""
    summary = json.loads(seed_summary.read_text())
    attackers = set(summary.get("attackers", []))
    return mean_std([c["test_acc"] for c in summary["clients"]
                     if c["client"] not in attackers])[0]


def plot(results: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(6, 4))
    for rule in dict.fromkeys(r["rule"] for r in results):
        rows = sorted((r for r in results if r["rule"] == rule), key=lambda r: r["fraction"])
        axes.errorbar([r["fraction"] for r in rows], [r["test_acc"] for r in rows],
                      yerr=[r["test_acc_std"] for r in rows], marker="o", capsize=3, label=rule)
    axes.set_xlabel("fraction of attacking clients")
    axes.set_ylabel("final test accuracy")
    axes.set_title(title, fontsize=9)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="configs/quickstart.yaml")
    parser.add_argument("--rules", default=",".join(get_args(Rule)))
    parser.add_argument("--fractions", type=_floats, default=[0.0, 0.1, 0.2, 0.3])
    parser.add_argument("--kind", default="sign_flip", choices=get_args(AttackKind))
    parser.add_argument("--scale", type=float, default=None,
                        help="the attack's factor (default: the kind's, see attack.scale)")
    parser.add_argument("--rounds", type=int, default=None, help="default: the config's")
    parser.add_argument("--seeds", default="0", help="comma-separated")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a further config override, e.g. partition=uniform (repeatable)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", default="runs/robust_aggregation")
    options = parser.parse_args()
    options.seeds = "[" + options.seeds + "]"
    out = Path(options.out)
    out.mkdir(parents=True, exist_ok=True)
    results = []
    for rule in options.rules.split(","):
        for fraction in options.fractions:
            results.append(run_cell(options, rule, fraction))
            row = results[-1]
            print(f"{rule:>12} attackers {fraction:.0%}: test_acc {row['test_acc']:.4f} "
                  f"± {row['test_acc_std']:.4f}, honest clients {row['honest_test_acc']:.4f} "
                  f"({row['seconds']:.0f}s)", flush=True)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    with (out / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=[k for k in results[0] if k != "run_dir"],
                                extrasaction="ignore")
        writer.writeheader()
        writer.writerows(results)
    first = results[0]
    plot(results, out / "robust_aggregation.png",
         f"{Path(options.config).stem} {' '.join(options.set)}: {options.kind} "
         f"(scale {first['scale']:g}), "
         f"{first['rounds']} rounds, seeds {','.join(map(str, first['seeds']))}")
    print(f"wrote {out}/results.json, results.csv, robust_aggregation.png")


if __name__ == "__main__":
    main()
