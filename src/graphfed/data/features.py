"""Feature preprocessing a protocol prescribes, applied to a loaded dataset as a whole."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch_geometric.data import Data

from graphfed.data.datasets import GraphDataset


def normalize_rows(x: torch.Tensor) -> torch.Tensor:
    """Each row summing to one: shifted by the matrix's minimum where that is negative, then
    divided by the row's sum (a row summing below 1, e.g. all zeros, by 1): the law of PyG's
    ``NormalizeFeatures``, which FED-PUB's data generator applies."""
    x = x.float()
    if x.numel() and float(x.min()) < 0:
        x = x - x.min()
    return x / x.sum(dim=-1, keepdim=True).clamp(min=1.0)


def row_normalized(data: GraphDataset) -> GraphDataset:
    """``data`` with every node-feature row normalised (``normalize_rows``); the loaded
    dataset is left as it is."""
    def normalized(graph: Data) -> Data:
        copy = graph.clone()
        copy.x = normalize_rows(graph.x)
        return copy

    if data.graph is not None:
        return replace(data, graph=normalized(data.graph))
    return replace(data, graphs=[normalized(g) for g in data.graphs])
