"""Wall time per fit round of one experiment on graphfed's three runtimes: in-process, Flower's
simulation engine (Ray), and a real deployment on this machine (a SuperLink and one SuperNode per
client as separate processes, TLS and node authentication on).

A fit round is timed on the server, from sending the round's messages to the end of aggregation
(``train_seconds`` in ``metrics.jsonl``); the median over rounds leaves out the first round's
start-up. The final accuracy is printed too: it is the same on every runtime.

    GRAPHFED_DATA=../shared/datasets python benchmarks/runtime_rounds.py [--rounds N]
        [--runtimes simulation,flower-sim,flower] [CONFIG key=value ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from graphfed.cli.common import split_args
from graphfed.config import load_config, with_overrides
from graphfed.flower.loopback import LoopbackFederation
from graphfed.launch import run as run_experiment


def fit_seconds(run_dir: Path) -> list[float]:
    lines = map(json.loads, (run_dir / "seed-0" / "metrics.jsonl").read_text().splitlines())
    return [line["train_seconds"] for line in lines if line["round"] > 0]


def report(runtime: str, run_dir: Path, summary: dict) -> str:
    seconds = fit_seconds(run_dir)
    return (f"RESULT runtime={runtime} rounds={len(seconds)} "
            f"median_round_s={statistics.median(seconds[1:] or seconds):.3f} "
            f"first_round_s={seconds[0]:.3f} test_acc={summary['final']['test_acc']:.4f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--runtimes", default="simulation,flower-sim,flower")
    parser.add_argument("args", nargs="*", default=["configs/quickstart.yaml"])
    options = parser.parse_args()
    path, overrides = split_args(options.args)
    config = load_config(path, [*overrides, f"rounds={options.rounds}",
                                f"eval_every={options.rounds}", "checkpoint_every=0",
                                "device=cpu"])
    with tempfile.TemporaryDirectory() as tmp:
        for runtime in options.runtimes.split(","):
            out = Path(tmp) / runtime
            if runtime == "flower":
                with LoopbackFederation(config, Path(tmp) / "federation") as fed:
                    run_dir, summary = fed.run(out=out)
            else:
                run_dir, summary = run_experiment(with_overrides(config, {"runtime": runtime}), out,
                                                  progress=False)
            print(report(runtime, run_dir, summary), flush=True)


if __name__ == "__main__":
    main()
