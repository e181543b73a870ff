"""A data owner's file: one client's data plus the run's public shape, so a SuperNode loads only
its own partition. Written by ``graphfed federation export`` (no flwr needed).

Format (version ``OWNER_FORMAT``; docs/flower.md): a ``torch.save`` of one ``OwnerData`` whose
``data`` is a ``NodeClient`` (a PyG ``Data`` subgraph with train/val/test masks and the nodes'
global ids; at the edge level an ``EdgeClient``, the same with its ``EdgeSplit`` of supervision
pairs) or a ``GraphClient`` (``Data`` graphs per split). It is read with
``weights_only=True`` and only these classes allowed, so a swapped file cannot run code; it is
written readable by its owner only."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import torch

from graphfed.build import federated_data
from graphfed.config import ExperimentConfig
from graphfed.data.federated import (
    ClientData,
    EdgeClient,
    EdgeSplit,
    GraphClient,
    NodeClient,
)
from graphfed.errors import GraphfedError
from graphfed.serialization import graph_classes, safe_load, write_private

OWNER_FORMAT = 1  # bump when OwnerData changes; a file of another version is refused


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
    format_version: int = 0  # files from before versioning read as 0


def export_partition(config: ExperimentConfig, seed: int, out: Path) -> list[Path]:
    """One ``client-<i>.pt`` per client of ``config``'s partition for ``seed``."""
    data = federated_data(config, seed)
    out.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths = []
    for i, client in enumerate(data.clients):
        owner = OwnerData(i, data.num_clients, data.level, data.num_features, data.num_classes,
                          client, data.global_test, data.partition_id, OWNER_FORMAT)
        buffer = io.BytesIO()
        torch.save(owner, buffer)
        path = out / f"client-{i}.pt"
        write_private(path, buffer.getvalue())
        paths.append(path)
    return paths


def load_owner(path: str | Path) -> OwnerData:
    """An owner's file, read as data only: a swapped file cannot run code on the owner's
    machine."""
    owner = safe_load(Path(path), "owner file",
                      [OwnerData, NodeClient, EdgeClient, EdgeSplit, GraphClient,
                       *graph_classes()])
    if not isinstance(owner, OwnerData):
        raise GraphfedError(f"{path} is not a graphfed owner file (graphfed federation export)")
    if owner.format_version != OWNER_FORMAT:
        raise GraphfedError(f"{path} is an owner file of format {owner.format_version}; this "
                            f"graphfed reads format {OWNER_FORMAT}: export the owners' files "
                            "again (graphfed federation export)")
    return owner
