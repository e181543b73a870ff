"""Compare graphfed's GPFL graph properties with the tensors GPFL's authors ship, and time them.

The authors' repository (Jiachen2cc/Graph-Personalized-Federated-Learning) holds the properties
its code computed for every graph, ``property/{PROTEINS,NCI1}.pt`` (float32, graphs x 6, in
dataset order). Given the folder holding them, this prints the time to compute all properties
(no cache) and the largest absolute difference per property:

    GRAPHFED_DATA=... python benchmarks/verify_gpfl_properties.py PATH/TO/property
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch

from graphfed.data import load_dataset
from graphfed.data.properties import PROPERTIES, graph_properties


def main(folder: Path) -> None:
    for dataset in ("PROTEINS", "NCI1"):
        graphs = load_dataset(dataset).graphs
        start = time.perf_counter()
        ours = torch.stack([graph_properties(g.edge_index, g.num_nodes) for g in graphs])
        seconds = time.perf_counter() - start
        theirs = torch.load(folder / f"{dataset}.pt", weights_only=True).double()
        gaps = (ours - theirs).abs().max(dim=0).values
        print(f"{dataset}: {len(graphs)} graphs in {seconds:.2f} s; max |ours - theirs|: "
              + ", ".join(f"{name} {gap:.1e}" for name, gap in zip(PROPERTIES, gaps.tolist(),
                                                                   strict=True)))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
