"""Data layer: real datasets by name, federated simulations, partition artifacts."""

from graphfed.data.datasets import GraphDataset, available, load_dataset
from graphfed.data.federated import (
    FederatedData,
    GraphClient,
    NodeClient,
    build_partition,
    load_or_build_partition,
    materialize,
)
from graphfed.data.partition import parse_partition

__all__ = [
    "FederatedData",
    "GraphClient",
    "GraphDataset",
    "NodeClient",
    "available",
    "build_partition",
    "load_dataset",
    "load_or_build_partition",
    "materialize",
    "parse_partition",
]
