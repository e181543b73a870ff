"""Every algorithm for a few rounds on small real data, metrics.jsonl without timings, as JSON:
run it on two commits and compare the files to show a refactor changed no number.

    OMP_NUM_THREADS=1 PYTHONPATH=src GRAPHFED_DATA=../shared/datasets \
        python benchmarks/metrics_parity.py OUT.json
"""
import json
import sys
import tempfile
from pathlib import Path

from graphfed.config import load_config
from graphfed.experiment import run_experiment

NODE = ["dataset=Cora", "num_clients=3", "partition=metis", "rounds=3", "checkpoint_every=0", "device=cpu"]
GRAPH = ["dataset=MUTAG", "num_clients=3", "partition=dirichlet", "rounds=3", "model=gin", "checkpoint_every=0", "device=cpu"]
CASES = {
 "fedavg": NODE, "fedprox": NODE, "local": NODE, "fedsage": NODE, "fedgcn": NODE, "graphfl": NODE,
 "d-fedgnn": NODE, "fedego": NODE + ["batch_size=32"], "fedsage+": NODE + ["fedsage+.gen_rounds=2", "fedsage+.num_pred=2"],
 "cgsv": GRAPH, "eu": GRAPH, "dw": GRAPH, "cffl": GRAPH, "gcfl": GRAPH + ["gcfl.warmup=1", "gcfl.eps1=10", "gcfl.eps2=0.0001"],
 "gcfl+": GRAPH + ["gcfl+.warmup=1", "gcfl+.seq_length=2", "gcfl+.eps1=10", "gcfl+.eps2=0.0001"],
 "fedstar": GRAPH, "fgfl": GRAPH + ["fgfl.exact_shapley=true"],
 "fedavg-graph": GRAPH, "fgfl-global": GRAPH + ["partition.global_test=0.1", "client_global_eval=true"],
 "fedego-global": ["dataset=Cora", "num_clients=3", "partition=fedego_label", "rounds=2", "checkpoint_every=0", "device=cpu", "batch_size=32", "client_global_eval=true"],
}
DROP = {"train_seconds", "eval_seconds"}
out = {}
for name, over in CASES.items():
    algo = name.split("-")[0] if name not in ("d-fedgnn",) else name
    cfg = load_config(None, [f"algorithm={algo}", *over, f"name={name}"])
    with tempfile.TemporaryDirectory() as d:
        run_dir, _ = run_experiment(cfg, d, progress=False)
        lines = [json.loads(l) for l in (run_dir / "seed-0" / "metrics.jsonl").read_text().splitlines()]
    out[name] = [{k: v for k, v in l.items() if k not in DROP} for l in lines]
    print(name, "done", flush=True)
Path(sys.argv[1]).write_text(json.dumps(out, indent=1, sort_keys=True))
