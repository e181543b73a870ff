"""The processed-data cache follows the raw files it was built from: a changed data root or a
changed file gets a build of its own, a damaged file is named (against the root's SHA256SUMS)
instead of being cached or hidden, and a warm cache costs no hashing."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from graphfed.data import load_dataset
from graphfed.data.datasets import DatasetError, data_root
from graphfed.data.staged import BUILT, DamagedCopy
from tests.conftest import require

pytestmark = require("Cora")
RAW = Path("Planetoid") / "Cora" / "raw"


def _copy(tmp_path: Path, name: str, checksums: bool = True) -> Path:
    """A data root holding a copy of the staged Cora raw files (and their SHA256SUMS lines)."""
    root = tmp_path / name
    shutil.copytree(data_root() / RAW, root / RAW)
    for path in (root / RAW).iterdir():
        path.chmod(0o644)  # the staged files are read-only; the tests damage their copies
    if checksums:
        lines = [line for line in (data_root() / "SHA256SUMS").read_text().splitlines()
                 if f"/{RAW.as_posix()}/" in line]
        (root / "SHA256SUMS").write_text("\n".join(lines) + "\n")
    return root


def _damage(root: Path) -> Path:
    path = root / RAW / "ind.cora.x"
    path.write_bytes(path.read_bytes()[:100])
    return path


def _load(monkeypatch, root: Path, cache: Path):
    monkeypatch.setenv("GRAPHFED_DATA", str(root))
    monkeypatch.setenv("GRAPHFED_CACHE", str(cache))
    return load_dataset("Cora")


def _built(cache: Path) -> dict[str, Path]:
    """Data root recorded by each built cache folder -> the raw folder its link points at."""
    out = {}
    for record in cache.rglob(BUILT):
        out[json.loads(record.read_text())["root"]] = (record.parent / "Cora" / "raw").resolve()
    return out


def test_a_changed_data_root_gets_a_build_of_its_own(tmp_path, monkeypatch):
    first, second, cache = _copy(tmp_path, "first"), _copy(tmp_path, "second"), tmp_path / "c"
    assert _load(monkeypatch, first, cache).graph.num_nodes == 2708
    assert _load(monkeypatch, second, cache).graph.num_nodes == 2708
    assert _built(cache) == {str(first): first / RAW, str(second): second / RAW}


@pytest.mark.parametrize("checksums", [True, False], ids=["with SHA256SUMS", "without"])
def test_a_damaged_copy_is_named_and_the_good_copy_loads_after_it(tmp_path, monkeypatch,
                                                                 checksums):
    good, bad, cache = _copy(tmp_path, "good"), _copy(tmp_path, "bad", checksums), tmp_path / "c"
    damaged = _damage(bad)
    if checksums:
        with pytest.raises(DamagedCopy, match=re.escape(
                f"{damaged} does not match its checksum in {bad / 'SHA256SUMS'}")):
            _load(monkeypatch, bad, cache)
    else:
        with pytest.raises(DatasetError, match=re.escape(
                f"its raw files in {bad / RAW} could not be processed")):
            _load(monkeypatch, bad, cache)
    assert _load(monkeypatch, good, cache).graph.num_nodes == 2708
    assert _built(cache) == {str(good): good / RAW}  # nothing was cached from the bad copy


def test_a_warm_cache_does_not_hide_a_file_damaged_after_it_was_built(tmp_path, monkeypatch):
    root, cache = _copy(tmp_path, "data"), tmp_path / "c"
    _load(monkeypatch, root, cache)
    damaged = _damage(root)
    with pytest.raises(DamagedCopy, match=re.escape(f"{damaged} does not match its checksum")):
        _load(monkeypatch, root, cache)


def test_a_warm_cache_hashes_nothing(tmp_path, monkeypatch):
    import graphfed.data.staged

    root, cache = _copy(tmp_path, "data"), tmp_path / "c"
    _load(monkeypatch, root, cache)

    def no_hashing(path):
        raise AssertionError(f"{path} was hashed again")

    monkeypatch.setattr(graphfed.data.staged, "_sha256", no_hashing)
    assert _load(monkeypatch, root, cache).graph.num_nodes == 2708
