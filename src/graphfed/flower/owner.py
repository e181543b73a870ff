"""A data owner's file: one client's data plus the run's public shape, so a SuperNode loads only
its own partition. Written by ``graphfed federation export`` (no flwr needed)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from graphfed.build import federated_data
from graphfed.config import ExperimentConfig
from graphfed.data.federated import ClientData, GraphClient, NodeClient
from graphfed.serialization import graph_classes, safe_load


@dataclass
class OwnerData:
    client_id: int
    num_clients: int
    level: str
    num_features: int
    num_classes: int
    data: ClientData
    global_test: ClientData | None  # public evaluation set, when the partition has one
    partition_id: str = ""


def export_partition(config: ExperimentConfig, seed: int, out: Path) -> list[Path]:
    """One ``client-<i>.pt`` per client of ``config``'s partition for ``seed``."""
    data = federated_data(config, seed)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, client in enumerate(data.clients):
        owner = OwnerData(i, data.num_clients, data.level, data.num_features, data.num_classes,
                          client, data.global_test, data.partition_id)
        path = out / f"client-{i}.pt"
        torch.save(owner, path)
        paths.append(path)
    return paths


def load_owner(path: str | Path) -> OwnerData:
    """An owner's file, read as data only: a swapped file cannot run code on the owner's
    machine."""
    owner = safe_load(Path(path), "owner file",
                      [OwnerData, NodeClient, GraphClient, *graph_classes()])
    if not isinstance(owner, OwnerData):
        raise TypeError(f"{path} is not a graphfed owner file (graphfed federation export)")
    return owner
