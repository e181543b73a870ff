"""FedSpray's published clients (Fu et al., KDD 2024), replayed exactly.

Its tables come from one Louvain run whose draw no seed recovers, so the authors publish the
result: one text file per client, ``<Dataset>_<community>.txt``, listing that community's node ids
(as floats, one a line, in the dataset's node order). Their ``data.py`` seeds NumPy's legacy
generator with the run's seed, shuffles the sorted list of the dataset's files (the client order),
then shuffles each file's nodes in that client order, and cuts each client at ⌊0.4·n⌋ and ⌊0.7·n⌋
into train / validation / test. ``fedspray_plan`` draws the same numbers in the same order, so the
same seed gives the authors' clients, in their order, with their splits. Nodes in no file belong to
no client, and there is no global test set (FedSpray evaluates on each client's test nodes).

The files are parsed as plain text (one number a line); nothing in them is ever executed.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from graphfed.data.datasets import SPECS, data_root
from graphfed.data.partition.plan import TEST, TRAIN, VAL, SplitPlan
from graphfed.errors import GraphfedError

WHO = "partition fedspray_published"
FOLDER = Path("partitions") / "FedSpray"  # under GRAPHFED_DATA


@dataclass(frozen=True)
class ClientFile:
    """One client's published node list: its file name and its node ids in file order."""

    name: str
    ids: np.ndarray


def default_folder() -> Path:
    """``<GRAPHFED_DATA>/partitions/FedSpray``, where the published lists are staged."""
    root = data_root()
    if root is None:
        raise GraphfedError(f"{WHO}: GRAPHFED_DATA is unset, so there is no default folder of "
                            "client files; set partition.files")
    return root / FOLDER


def file_prefix(dataset: str) -> str:
    """The name the authors' code gives ``dataset`` (and its files): PyG's own name, e.g.
    ``Physics`` for graphfed's ``Coauthor-Physics``."""
    spec = SPECS.get(dataset)
    return (spec.pyg_name or spec.name) if spec is not None else dataset


def client_paths(folder: Path, prefix: str) -> list[Path]:
    """The files ``<prefix>_*.txt`` of ``folder`` in sorted name order (the order the authors
    shuffle)."""
    if not folder.is_dir():
        raise GraphfedError(f"{WHO}: the folder of client files {folder} does not exist")
    paths = sorted(p for p in folder.glob(f"{prefix}_*.txt") if p.is_file())
    if not paths:
        raise GraphfedError(f"{WHO}: no client files for dataset {prefix} under {folder} "
                            f"(expected {prefix}_<community>.txt)")
    return paths


def files_digest(folder: Path, prefix: str) -> str:
    """A digest of the client files' names and bytes, so that an edited file gets a partition
    of its own rather than the cached one built from its old contents."""
    digest = hashlib.sha256()
    for path in client_paths(folder, prefix):
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def read_client_files(folder: Path, prefix: str, num_nodes: int) -> list[ClientFile]:
    """The client files (``client_paths``), each validated: node ids integral, in
    ``[0, num_nodes)``, no node listed twice in one file or in two files."""
    paths = client_paths(folder, prefix)
    owner = np.full(num_nodes, -1, dtype=np.int64)
    clients = []
    for k, path in enumerate(paths):
        ids = _node_ids(path, num_nodes)
        values, counts = np.unique(ids, return_counts=True)
        if (counts > 1).any():
            raise GraphfedError(f"{WHO}: node {values[counts > 1][0]} is listed twice in "
                                f"{path.name}")
        taken = owner[ids] >= 0
        if taken.any():
            node = ids[taken][0]
            raise GraphfedError(f"{WHO}: node {node} is in both {paths[owner[node]].name} and "
                                f"{path.name}; a node belongs to one client at most")
        owner[ids] = k
        clients.append(ClientFile(path.name, ids))
    return clients


def _node_ids(path: Path, num_nodes: int) -> np.ndarray:
    """The ids one file lists, one number a line (blank lines skipped)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise GraphfedError(f"{WHO}: {path.name} is not a text file of node ids") from None
    ids = []
    for number, line in enumerate(lines, start=1):
        text = line.strip()
        if not text:
            continue
        try:
            value = float(text)
        except ValueError:
            value = float("nan")
        if not value.is_integer():
            raise GraphfedError(f"{WHO}: {path.name} line {number}: {text[:40]!r} is not an "
                                "integral node id")
        if not 0 <= value < num_nodes:
            raise GraphfedError(f"{WHO}: {path.name} line {number}: node {int(value)} is out of "
                                f"range; the graph has {num_nodes} nodes (ids 0..{num_nodes - 1})")
        ids.append(int(value))
    if not ids:
        raise GraphfedError(f"{WHO}: {path.name} lists no node")
    return np.array(ids, dtype=np.int64)


def split_cuts(n: int, ratios: tuple[float, float, float]) -> tuple[int, int]:
    """Where a client of ``n`` shuffled nodes stops training and stops validating: ⌊r_train·n⌋
    and ⌊(r_train + r_val)·n⌋, truncated as the authors' code does (its 0.4 and 0.7). The sum
    is rounded to 9 decimals first so that it is the number one would write: in floats
    0.7 + 0.1 is 0.7999999999999999, which would cut 10 nodes at 7, not 8 (0.4 + 0.3 is exactly
    0.7)."""
    return int(ratios[0] * n), int(round(ratios[0] + ratios[1], 9) * n)


def fedspray_plan(clients: list[ClientFile], num_clients: int,
                  ratios: tuple[float, float, float], seed: int) -> SplitPlan:
    """The authors' draws: with NumPy's legacy generator seeded by ``seed``, one shuffle of the
    client order, then one shuffle of each client's nodes in that order; the first cut train,
    then validation, the rest test. Client ids are returned in the dataset's node order."""
    if num_clients != len(clients):
        raise GraphfedError(f"{WHO}: the files give {len(clients)} clients "
                            f"({clients[0].name} ...) but num_clients is {num_clients}; set "
                            f"num_clients={len(clients)}")
    rng = np.random.RandomState(seed)
    order = rng.permutation(len(clients))  # the same draws as shuffling the list of files
    client_ids, client_splits = [], []
    for k in order:
        ids = clients[k].ids.copy()
        rng.shuffle(ids)
        train_end, val_end = split_cuts(len(ids), ratios)
        codes = np.full(len(ids), TEST, dtype=np.int64)
        codes[:train_end] = TRAIN
        codes[train_end:val_end] = VAL
        by_node = np.argsort(ids)
        client_ids.append(torch.from_numpy(ids[by_node]))
        client_splits.append(torch.from_numpy(codes[by_node]))
    return SplitPlan(torch.empty(0, dtype=torch.long), client_ids, client_splits)
