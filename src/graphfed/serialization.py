"""Reading graphfed's own files without running anything in them, and writing private ones.

Checkpoints, partition artifacts, owner files and a Flower node's client state are read with
``torch.load(weights_only=True)``: tensors, numbers, strings and containers only, plus the few
data classes a caller names. A crafted file whose pickle asks for anything else (a function to
call, another class to build) is refused with one readable error before any of it runs.
"""

from __future__ import annotations

import io
import os
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from graphfed.errors import GraphfedError


def graph_classes() -> list[type]:
    """PyG's graph containers (a ``Data`` and its storage), for files that hold graphs."""
    from torch_geometric.data.data import Data, DataEdgeAttr, DataTensorAttr
    from torch_geometric.data.storage import GlobalStorage

    return [Data, DataEdgeAttr, DataTensorAttr, GlobalStorage]


def safe_load(source: str | Path | bytes, what: str, allowed: Sequence[type] = (),
              map_location: str | torch.device | None = None) -> Any:
    """The object saved in ``source`` (a path, or the bytes themselves), built only from plain
    data and the ``allowed`` classes; ``what`` names the file in the error."""
    handle = io.BytesIO(source) if isinstance(source, bytes) else source
    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(handle, weights_only=True, map_location=map_location)
    except pickle.UnpicklingError as e:
        name = "the received state" if isinstance(source, bytes) else str(source)
        first = str(e).strip().splitlines()
        detail = next((line for line in first if "GLOBAL" in line or "Unsupported" in line),
                      first[0] if first else "")
        raise GraphfedError(f"{name} is not a {what} graphfed can read safely "
                            f"({detail.strip()[:160]}); nothing in it was run") from None


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only from the first byte on (keys, an
    owner's data): the file is created 0600, and an existing one is narrowed before writing."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
