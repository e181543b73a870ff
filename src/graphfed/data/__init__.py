"""Data layer: real datasets by name, federated simulations, partition artifacts, graph
properties.

The names below load on first use (PEP 562), so listing the datasets (``graphfed datasets``)
does not import torch or PyG.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOME = {
    "GraphDataset": "datasets", "available": "datasets", "load_dataset": "datasets",
    "FederatedData": "federated", "GraphClient": "federated", "NodeClient": "federated",
    "build_partition": "federated", "load_or_build_partition": "federated",
    "materialize": "federated", "parse_partition": "partition",
    "dataset_properties": "properties",
}
__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'graphfed.data' has no attribute '{name}'")
    return getattr(importlib.import_module(f"graphfed.data.{_HOME[name]}"), name)
