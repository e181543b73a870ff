"""Every algorithm for a few rounds on small real data, its metrics.jsonl without timings, as
one JSON file: run it on two commits and compare the files to show that a refactor changed no
number (all per-round and per-client metrics). Every case pins its engine: sequential, and
``engine=batched`` for a few algorithms the batched engine trains (``*-batched``).

    OMP_NUM_THREADS=1 PYTHONPATH=src GRAPHFED_DATA=../shared/datasets \\
        python benchmarks/metrics_parity.py OUT.json
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from graphfed.config import load_config
from graphfed.experiment import run_experiment

COMMON = ["num_clients=3", "rounds=3", "checkpoint_every=0", "device=cpu", "engine=sequential"]
BATCHED = "engine=batched"  # after COMMON's engine: the later override wins
NODE = ["dataset=Cora", "partition=metis", *COMMON]
GRAPH = ["dataset=MUTAG", "partition=dirichlet", "model=gin", *COMMON]
SPLITS_EARLY = ["warmup=1", "eps1=10", "eps2=0.0001"]  # GCFL's clusters split within 3 rounds
CASES = {
    "fedavg": NODE, "fedprox": NODE, "local": NODE, "fedsage": NODE, "fedgcn": NODE,
    "graphfl": NODE, "d-fedgnn": NODE, "fedego": [*NODE, "batch_size=32"],
    "fedsage+": [*NODE, "fedsage+.gen_rounds=2", "fedsage+.num_pred=2"],
    "cgsv": GRAPH, "eu": GRAPH, "dw": GRAPH, "cffl": GRAPH, "fedstar": GRAPH,
    "gcfl": [*GRAPH, *(f"gcfl.{o}" for o in SPLITS_EARLY)],
    "gcfl+": [*GRAPH, "gcfl+.seq_length=2", *(f"gcfl+.{o}" for o in SPLITS_EARLY)],
    "fgfl": [*GRAPH, "fgfl.exact_shapley=true"],
    "fedavg-graph": GRAPH,
    "fgfl-global": [*GRAPH, "partition.global_test=0.1", "client_global_eval=true"],
    "fedego-global": ["dataset=Cora", "num_clients=3", "partition=fedego_label", "rounds=2",
                      "checkpoint_every=0", "device=cpu", "engine=sequential", "batch_size=32",
                      "client_global_eval=true"],
    "fedavg-batched": [*NODE, BATCHED], "fedprox-batched": [*NODE, BATCHED],
    "local-batched": [*NODE, BATCHED], "fedavg-graph-batched": [*GRAPH, BATCHED],
}
TIMINGS = {"train_seconds", "eval_seconds"}


def algorithm_of(case: str) -> str:
    return case if case in ("d-fedgnn",) else case.split("-")[0]


def main(out: Path) -> None:
    results = {}
    for case, overrides in CASES.items():
        config = load_config(None, [f"algorithm={algorithm_of(case)}", *overrides,
                                    f"name={case}"])
        with tempfile.TemporaryDirectory() as tmp:
            run_dir, _ = run_experiment(config, tmp, progress=False)
            lines = (run_dir / "seed-0" / "metrics.jsonl").read_text().splitlines()
        results[case] = [{k: v for k, v in json.loads(line).items() if k not in TIMINGS}
                         for line in lines]
        print(case, "done", flush=True)
    out.write_text(json.dumps(results, indent=1, sort_keys=True))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
