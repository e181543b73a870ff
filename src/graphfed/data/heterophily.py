"""The filtered Chameleon and Squirrel of Platonov et al. (ICLR 2023, "A critical look at the
evaluation of GNNs under heterophily"): duplicate nodes removed, which PyG has no class for.

Their ``.npz`` holds the keys PyG's ``HeterophilousGraphDataset`` reads (``node_features``,
``node_labels``, ``edges`` as E x 2, ``train_masks``/``val_masks``/``test_masks`` as 10 x N), so
this reader builds the same ``Data`` that class builds: undirected edges and N x 10 split masks.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch_geometric.data import Data, InMemoryDataset
from torch_geometric.utils import to_undirected

FILTERED = ("chameleon", "squirrel")


class FilteredHeterophily(InMemoryDataset):
    """``FilteredHeterophily(root, "chameleon")`` reads ``root/chameleon_filtered/raw/
    chameleon_filtered.npz``; ``numpy.load`` without pickles, so the file holds arrays only."""

    def __init__(self, root: str, name: str) -> None:
        self.name = f"{name.lower()}_filtered"
        if name.lower() not in FILTERED:
            raise ValueError(f"no filtered heterophily set {name!r}; known: {FILTERED}")
        super().__init__(root)
        self.load(self.processed_paths[0])

    @property
    def raw_dir(self) -> str:
        return str(Path(self.root) / self.name / "raw")

    @property
    def processed_dir(self) -> str:
        return str(Path(self.root) / self.name / "processed")

    @property
    def raw_file_names(self) -> str:
        return f"{self.name}.npz"

    @property
    def processed_file_names(self) -> str:
        return "data.pt"

    def download(self) -> None:
        raise FileNotFoundError(f"{self.raw_paths[0]} (stage it under GRAPHFED_DATA: "
                                "graphfed has no download for the filtered sets)")

    def process(self) -> None:
        with np.load(self.raw_paths[0], allow_pickle=False) as raw:
            x = torch.from_numpy(raw["node_features"]).float()
            y = torch.from_numpy(raw["node_labels"]).long()
            edges = torch.from_numpy(raw["edges"]).long().t().contiguous()
            masks = {f"{split}_mask": torch.from_numpy(raw[f"{split}_masks"]).bool().t()
                     .contiguous() for split in ("train", "val", "test")}
        edge_index = to_undirected(edges, num_nodes=x.size(0))
        self.save([Data(x=x, y=y, edge_index=edge_index, **masks)], self.processed_paths[0])
