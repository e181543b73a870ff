"""A run directory's own files, whatever runtime trained it: its name (a taken one gets a
``-2``, ``-3`` ... suffix, said when the run starts), its resolved ``config.yaml``, and the
top-level ``summary.json`` over the seeds."""

from __future__ import annotations

import math
import shutil
from datetime import datetime
from pathlib import Path

import yaml

from graphfed.config import ExperimentConfig
from graphfed.errors import GraphfedError
from graphfed.metrics import mean_std


def _run_name(config: ExperimentConfig) -> str:
    if config.name:
        return config.name
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"{config.algorithm}-{config.dataset.lower()}-{config.partition.name}-{stamp}"


def _free_dir(out: Path, name: str) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    candidate, n = out / name, 1
    while candidate.exists():
        n += 1
        candidate = out / f"{name}-{n}"
    candidate.mkdir()
    return candidate


def new_run_dir(config: ExperimentConfig, out: Path, announce: str | None = None) -> Path:
    """A fresh run directory holding the resolved ``config.yaml``; an output directory that is
    a file or cannot be written is one readable error, and leaves no empty run directory.
    ``announce``: print the start line at once, naming the directory, the taken name it
    stands in for, and then ``announce`` (how the run trains)."""
    name = _run_name(config)
    try:
        run_dir = _free_dir(out, name)
    except OSError as e:
        raise GraphfedError(f"cannot make a run directory under --out {out}: {e.strerror} "
                            f"({e.filename}); choose a writable directory") from None
    try:
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    except OSError as e:
        shutil.rmtree(run_dir, ignore_errors=True)
        raise GraphfedError(f"cannot write {run_dir / 'config.yaml'}: {e.strerror}") from None
    if announce is not None:
        taken = f" (not {out / name}: that name is taken)" if run_dir.name != name else ""
        print(f"run directory: {run_dir}{taken}; {announce}", flush=True)
    return run_dir


def combine_seeds(config: ExperimentConfig, summaries: list[dict]) -> dict:
    """Top-level summary: final metrics averaged over seeds, plus mean/std/values per metric,
    the engine the clients trained on, and the heterogeneity card of ``partition_id`` (the
    first seed's partition; each seed's summary has its own); the privacy ledger of the seed
    that spent the most, and the seeds a privacy budget stopped."""
    keys = [k for k in summaries[0]["final"] if all(k in s["final"] for s in summaries)]
    over = {}
    for key in keys:
        values = [s["final"][key] for s in summaries]
        mean, std = mean_std(values)
        over[key] = {"mean": mean, "std": std, "values": values}
    out = {
        "dataset": config.dataset, "algorithm": config.algorithm,
        "seeds": [s["seed"] for s in summaries],
        "partition_id": summaries[0]["partition_id"],
        "partition_ids": {str(s["seed"]): s["partition_id"] for s in summaries},
        "heterogeneity": summaries[0].get("heterogeneity"),  # None: a seed summary without one
        "final": {k: v["mean"] for k, v in over.items()},
        "over_seeds": over,
        "self_reported": sorted({k for s in summaries for k in s.get("self_reported", [])}
                                & set(over)),
        "rounds": config.rounds,
        "engine": config.engine,
        "seconds": sum(s["seconds"] for s in summaries),
    }
    private = [s for s in summaries if "privacy" in s]
    if private:  # the seed that spent the most: each seed's model is a release of its own
        worst = max(private, key=lambda s: _spent(s["privacy"]))
        out["privacy"] = {**worst["privacy"], "seed": worst["seed"]}
    stopped = {str(s["seed"]): s["stopped"] for s in summaries if "stopped" in s}
    if stopped:
        out["stopped"] = stopped
    return out


def _spent(privacy: dict) -> float:
    """A privacy block's epsilon, infinity where it is unbounded (null)."""
    epsilon = privacy["epsilon"]
    return math.inf if epsilon is None else float(epsilon)
