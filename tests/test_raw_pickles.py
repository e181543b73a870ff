"""Raw files that PyG unpickles (Planetoid's ``ind.*``) are never unpickled unverified: the
public files pass on their committed checksums whatever the data root, any other is read first
with an unpickler that admits only numpy arrays, CSR matrices and lists, and a crafted one is one
readable error before anything in it runs."""

from __future__ import annotations

import os
import pickle
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphfed.data import load_dataset
from graphfed.data.datasets import SPECS, DatasetError, data_root
from graphfed.data.raw_checksums import PUBLIC_SHA256
from graphfed.data.safe_pickle import UnsafePickle, check_pickle
from graphfed.data.staged import is_public
from graphfed.errors import GraphfedError
from tests.conftest import require

RAW = Path("Planetoid") / "Cora" / "raw"


class _Crafted:
    """Pickles as a call of ``os.mkdir(marker)``: unpickling it makes the marker folder."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self):
        return os.mkdir, (self.marker,)


def _cora_root(tmp_path: Path) -> Path:
    """A data root without SHA256SUMS holding a writable copy of the staged Cora raw files."""
    root = tmp_path / "data"
    shutil.copytree(data_root() / RAW, root / RAW)
    for path in (root / RAW).iterdir():
        path.chmod(0o644)
    return root


def _plant(raw: Path, marker: Path) -> Path:
    path = raw / "ind.cora.x"
    path.write_bytes(pickle.dumps(_Crafted(marker), protocol=2))
    return path


def _use(monkeypatch, root: Path | None, cache: Path) -> None:
    if root is None:
        monkeypatch.delenv("GRAPHFED_DATA", raising=False)
    else:
        monkeypatch.setenv("GRAPHFED_DATA", str(root))
    monkeypatch.setenv("GRAPHFED_CACHE", str(cache))


@require("Cora")
def test_a_crafted_raw_pickle_is_refused_before_it_runs(tmp_path, monkeypatch):
    root, marker = _cora_root(tmp_path), tmp_path / "ran"
    crafted = _plant(root / RAW, marker)
    _use(monkeypatch, root, tmp_path / "cache")
    with pytest.raises(GraphfedError) as caught:
        load_dataset("Cora")
    assert isinstance(caught.value, UnsafePickle)
    assert f"{crafted} is not a raw file graphfed can read safely" in str(caught.value)
    assert "posix.mkdir" in str(caught.value) and "nothing in it was run" in str(caught.value)
    assert not marker.exists()


@require("Cora")
def test_a_crafted_raw_pickle_is_one_line_and_exit_2_in_the_cli(tmp_path, monkeypatch):
    from graphfed.cli import app

    root, marker = _cora_root(tmp_path), tmp_path / "ran"
    crafted = _plant(root / RAW, marker)
    _use(monkeypatch, root, tmp_path / "cache")
    result = CliRunner().invoke(app, ["partition", "dataset=Cora", "num_clients=2", "--json"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith("error:") and f"{crafted} is not a raw file" in lines[0]
    assert not marker.exists()


@require("Cora")
def test_a_crafted_pickle_in_the_download_cache_is_refused_too(tmp_path, monkeypatch):
    """Without a data root PyG reads the raw files it downloaded into the cache; one put
    there is checked the same way before PyG processes it."""
    cache, marker = tmp_path / "cache", tmp_path / "ran"
    raw = cache / "downloads" / "Planetoid" / "Cora" / "raw"
    shutil.copytree(data_root() / RAW, raw)
    raw.joinpath("ind.cora.x").chmod(0o644)
    crafted = _plant(raw, marker)
    _use(monkeypatch, None, cache)
    with pytest.raises(UnsafePickle, match=f"{crafted} is not a raw file"):
        load_dataset("Cora")
    assert not marker.exists()


@require("Cora")
def test_the_public_files_pass_on_their_checksums_without_being_unpickled(tmp_path, monkeypatch):
    import graphfed.data.safe_pickle

    def not_trusted(path, dataset):
        raise AssertionError(f"{path} went to the restricted unpickler")

    root = _cora_root(tmp_path)  # no SHA256SUMS: the committed table alone vouches for them
    monkeypatch.setattr(graphfed.data.safe_pickle, "check_pickle", not_trusted)
    _use(monkeypatch, root, tmp_path / "cache")
    assert load_dataset("Cora").graph.num_nodes == 2708


@pytest.mark.parametrize("name", [pytest.param(n, marks=require(n)) for n in ("Cora", "CiteSeer")])
def test_the_staged_planetoid_files_match_the_committed_checksums(name):
    spec = SPECS[name]
    raw = data_root() / spec.class_root / spec.raw_subdir
    assert all(is_public(raw / f) for f in spec.pickled)


def test_every_raw_pickle_graphfed_loads_has_a_committed_checksum():
    pickled = {f for spec in SPECS.values() for f in spec.pickled}
    assert {f"ind.{n}.{p}" for n in ("cora", "citeseer", "pubmed")
            for p in ("x", "tx", "allx", "y", "ty", "ally", "graph")} == pickled
    assert pickled == set(PUBLIC_SHA256)


@require("Cora")
def test_a_benign_re_pickled_file_passes_the_restricted_unpickler_and_loads(tmp_path,
                                                                            monkeypatch):
    """Not the public bytes (pickled again by today's numpy, scipy and Python 3), but only
    arrays, a CSR matrix and lists: read without refusal, and Cora loads from it."""
    root = _cora_root(tmp_path)
    for part in ("x", "graph"):
        path = root / RAW / f"ind.cora.{part}"
        with path.open("rb") as f:
            obj = pickle.load(f, encoding="latin1")
        path.write_bytes(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
        assert not is_public(path)
        check_pickle(path, "Cora")
    _use(monkeypatch, root, tmp_path / "cache")
    data = load_dataset("Cora")
    assert data.graph.num_nodes == 2708 and data.graph.edge_index.size(1) == 10556


def test_the_restricted_unpickler_admits_arrays_matrices_and_adjacency_lists(tmp_path):
    """As numpy, scipy and Python 3 pickle them today (protocol 2 from Python 3 writes bytes as a
    call of _codecs.encode, which no public file holds and which stays refused)."""
    from collections import defaultdict

    import numpy as np
    import scipy.sparse as sp

    objects = {"labels": np.eye(3, dtype=np.int64),
               "features": sp.csr_matrix(np.array([[0.0, 1.5], [2.0, 0.0]], dtype=np.float32)),
               "graph": defaultdict(list, {0: [1, 2], 1: [0], 2: [0]})}
    for protocol in (3, 4, 5):
        for what, obj in objects.items():
            path = tmp_path / f"{what}-{protocol}"
            path.write_bytes(pickle.dumps(obj, protocol=protocol))
            check_pickle(path, "Test")  # no refusal


@pytest.mark.parametrize("payload", [
    pytest.param(lambda marker: _Crafted(marker), id="os.mkdir"),
    pytest.param(lambda marker: [1, {2: _Crafted(marker)}], id="nested in a container"),
])
def test_the_restricted_unpickler_refuses_anything_else(tmp_path, payload):
    marker = tmp_path / "ran"
    path = tmp_path / "ind.unknown.x"  # a name graphfed has no checksum for
    path.write_bytes(pickle.dumps(payload(marker), protocol=2))
    with pytest.raises(UnsafePickle, match=r"ind\.unknown\.x is not a raw file .*posix\.mkdir"):
        check_pickle(path, "Test")
    assert not marker.exists()


def test_a_csr_matrix_whose_indices_run_out_of_bounds_is_damaged(tmp_path):
    import numpy as np
    import scipy.sparse as sp

    matrix = sp.csr_matrix(np.eye(2, dtype=np.float32))
    matrix.indices = np.array([0, 7], dtype=matrix.indices.dtype)  # column 7 of 2
    path = tmp_path / "ind.unknown.x"
    path.write_bytes(pickle.dumps(matrix, protocol=4))
    with pytest.raises(pickle.UnpicklingError, match=r"ind\.unknown\.x: ValueError"):
        check_pickle(path, "Test")


@require("Cora")
def test_a_truncated_raw_pickle_without_checksums_is_named_as_damaged(tmp_path, monkeypatch):
    root = _cora_root(tmp_path)
    path = root / RAW / "ind.cora.x"
    path.write_bytes(path.read_bytes()[:100])
    _use(monkeypatch, root, tmp_path / "cache")
    with pytest.raises(DatasetError, match=r"could not be processed \(UnpicklingError: "
                                           r"ind\.cora\.x: "):
        load_dataset("Cora")
