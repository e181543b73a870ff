"""Reading graphfed's own files without running anything in them, and writing private ones.

Checkpoints, partition artifacts, owner files and a Flower node's client state are read with
``torch.load(weights_only=True)``: tensors, numbers, strings and containers only, plus the few
data classes a caller names. A crafted file whose pickle asks for anything else (a function to
call, another class to build) is refused with one readable error before any of it runs, and so is
a damaged one (empty, truncated, overwritten). Run records (``summary.json``, ``metrics.jsonl``)
are read here too, so that a damaged one is named with the line where it breaks.

Run records and checkpoints are written with ``atomic_write``: aside, flushed to the disk, then
renamed over the old file, so a crash or a full disk leaves the old file or the new one, whole.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
from collections.abc import Iterator, Sequence
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
              map_location: str | torch.device | None = None, remedy: str = "") -> Any:
    """The object saved in ``source`` (a path, or the bytes themselves), built only from plain
    data and the ``allowed`` classes; ``what`` names the file in the error, ``remedy`` (a
    sentence) says what to do about a damaged one."""
    handle = io.BytesIO(source) if isinstance(source, bytes) else source
    name = "the received state" if isinstance(source, bytes) else str(source)
    advice = f"; {remedy}" if remedy else ""
    try:
        with torch.serialization.safe_globals(list(allowed)):
            return torch.load(handle, weights_only=True, map_location=map_location)
    except pickle.UnpicklingError as e:
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        refused = next((line for line in lines if "GLOBAL" in line), None)
        if refused is not None:  # it asks for something to call or build: a crafted file
            raise GraphfedError(f"{name} is not a {what} graphfed can read safely "
                                f"({refused[:160]}); nothing in it was run{advice}") from None
        detail = next((line for line in lines if "Unsupported" in line), _first_line(e))
        raise GraphfedError(f"{name} is damaged: not a readable {what} ({detail[:160]})"
                            f"{advice}") from None
    except OSError as e:
        raise GraphfedError(f"{name} cannot be read ({e.strerror}){advice}") from None
    except Exception as e:
        # A truncated or overwritten file fails inside torch.load with whatever its reader
        # meets first: EOFError (empty), RuntimeError (a cut zip), ValueError, IndexError,
        # struct.error, UnicodeDecodeError (flipped bytes), measured on damaged checkpoints.
        raise GraphfedError(f"{name} is damaged: not a readable {what} "
                            f"({type(e).__name__}: {_first_line(e)}){advice}") from None


def _first_line(error: Exception) -> str:
    """The gist of a reader's error: its first sentence (torch's run on for lines)."""
    lines = str(error).strip().splitlines()
    if not lines:
        return "the file ends early" if isinstance(error, EOFError) else "no detail"
    return lines[0].split(". ")[0][:160]


def read_json(path: Path, what: str, keys: Sequence[str] = ()) -> dict:
    """The JSON object at ``path``, holding at least ``keys``; ``GraphfedError`` naming the file
    (and where it breaks) when it is unreadable, not JSON or not such an object."""
    data = _parse_json(_read_text(path, what), path, what)
    missing = [k for k in keys if k not in data] if isinstance(data, dict) else list(keys)
    if not isinstance(data, dict) or missing:
        found = "no object" if not isinstance(data, dict) else f"no {missing[0]!r}"
        raise GraphfedError(f"{path} is damaged: not a readable {what} ({found})")
    return data


def read_jsonl(path: Path, what: str) -> list[Any]:
    """One JSON value per non-blank line of ``path``; an error names the file and the line."""
    return _json_lines(_read_text(path, what).splitlines(), path, what)


def _json_lines(lines: list[str], path: Path, what: str) -> list[Any]:
    return [_parse_json(line, path, what, number)
            for number, line in enumerate(lines, 1) if line.strip()]


def read_metrics(path: Path) -> list[dict]:
    """The rounds of a run's ``metrics.jsonl``, each a record with an integer ``round``."""
    return _round_records(path, read_jsonl(path, "metrics.jsonl"))


def read_metrics_torn(path: Path) -> tuple[list[dict], GraphfedError | None]:
    """The rounds of a ``metrics.jsonl`` whose last line may be torn, and the error naming that
    line (None when it is whole). A crash or a full disk while a round is appended leaves its
    line cut short: no newline, not JSON. Only the last line can be torn so; damage anywhere
    else is the usual ``GraphfedError``."""
    what = "metrics.jsonl"
    text = _read_text(path, what)
    lines, torn = text.splitlines(), None
    if lines and not text.endswith("\n"):
        try:
            _parse_json(lines[-1], path, what, len(lines))
        except GraphfedError as e:
            lines, torn = lines[:-1], e
    return _round_records(path, _json_lines(lines, path, what)), torn


def _round_records(path: Path, rows: list[Any]) -> list[dict]:
    for number, row in enumerate(rows, 1):
        if not isinstance(row, dict) or not isinstance(row.get("round"), int):
            raise GraphfedError(f"{path} is damaged: record {number} is not a round's record "
                                "(no integer 'round')")
    return rows


def _read_text(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise GraphfedError(f"{path} is damaged: not a readable {what} (not UTF-8 text at byte "
                            f"{e.start})") from None
    except OSError as e:
        raise GraphfedError(f"{path} cannot be read as a {what} ({e.strerror})") from None


def _parse_json(text: str, path: Path, what: str, line: int | None = None) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        where = f"line {line}" if line is not None else f"line {e.lineno}, column {e.colno}"
        raise GraphfedError(f"{path} is damaged: not a readable {what} ({where}: {e.msg})"
                            ) from None


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by its owner only from the first byte on (keys, an
    owner's data): the file is created 0600, and an existing one is narrowed before writing."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


class WriteFailed(GraphfedError):
    """A file could not be written (a full disk, a lost mount); what it held before is kept."""


def atomic_write(path: Path, data: bytes | memoryview) -> None:
    """Replace ``path`` by ``data`` all at once: written to a file beside it, flushed to the disk,
    then renamed over it. A crash or a full disk at any moment leaves the old file or the new
    one, whole, and no temporary file after an error; an ``OSError`` becomes a ``WriteFailed``
    naming the file."""
    tmp = path.with_name(f".{path.name}.tmp")
    existed = path.exists()
    try:
        with open(tmp, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        if not isinstance(e, OSError):
            raise
        kept = "its previous content is kept" if existed else "nothing was written"
        raise WriteFailed(f"cannot write {path} ({e.strerror or e}); {kept}") from None
    _sync_folder(path.parent)


@contextlib.contextmanager
def writing(path: Path) -> Iterator[None]:
    """A block that writes ``path`` in place (appends): an ``OSError`` becomes a
    ``WriteFailed`` naming it."""
    try:
        yield
    except OSError as e:
        raise WriteFailed(f"cannot write {path} ({e.strerror or e})") from None


def _sync_folder(folder: Path) -> None:
    """Flush a folder's entries to the disk, so that a rename in it survives a power cut."""
    with contextlib.suppress(OSError):  # a file system that cannot sync folders
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
