"""FedEgo's upload per round and batch size (its Table 9's MiB columns), from the bytes of the
messages one round actually sends under the ``fedego-batch`` preset's protocol.

Per round the uploads are fixed by the partition and the batch size (one mashed ego-graph per
batch of training centres, one Θ_i per client), so one round measures them; the paper's Table 9
gives totals over 200 rounds, printed beside ours × 200. F1 per batch size needs the full preset
(``graphfed reproduce fedego-batch``).

    GRAPHFED_DATA=../shared/datasets python benchmarks/fedego_upload.py [--datasets Cora,CiteSeer]
"""

from __future__ import annotations

import argparse

from graphfed.experiment import build_federation
from graphfed.reproduce.catalog import get_preset
from graphfed.reproduce.papers.fedego import MIB
from graphfed.reproduce.plan import cell_config

ROUNDS = 200  # the paper's run length, for the totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", default="Cora,CiteSeer")
    options = parser.parse_args()
    preset = get_preset("fedego-batch")
    print("| dataset | method | mashed graphs / round | ego-graph MiB / round | × 200 | paper "
          "| parameter MiB / round | × 200 | paper |")
    print("|---|---|---|---|---|---|---|---|---|")
    for dataset in options.datasets.split(","):
        for variant in preset.variants:
            config = cell_config(preset, variant, dataset, [0], quick=False)
            fed = build_federation(config, seed=0)
            line = fed.fit_round(1)
            server = line.get("server", {})
            ego = server.get("upload_ego_bytes", 0)
            params = line["bytes_up"] - ego
            paper = {m: preset.paper.get((variant.method, dataset, m), "–")
                     for m in ("ego_mib", "param_mib")}
            print(f"| {dataset} | {variant.method} | {server.get('mashed_graphs', '–')} "
                  f"| {ego / MIB:.2f} | {ROUNDS * ego / MIB:.0f} | {paper['ego_mib']} "
                  f"| {params / MIB:.2f} | {ROUNDS * params / MIB:.0f} | {paper['param_mib']} |",
                  flush=True)


if __name__ == "__main__":
    main()
