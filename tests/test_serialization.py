"""Nothing graphfed reads from its own files runs code: a crafted pickle in a checkpoint, a
partition artifact, an owner file or a Flower node's stored state is refused, unexecuted."""

from __future__ import annotations

import dataclasses
import io
import os
import stat
import warnings
from pathlib import Path

import pytest
import torch

from graphfed.checkpoints import load_checkpoint, save_checkpoint
from graphfed.config import load_config
from graphfed.data.federated import artifact_path
from graphfed.errors import GraphfedError
from graphfed.experiment import build_federation
from graphfed.flower.owner import export_partition, load_owner
from graphfed.serialization import graph_classes, safe_load
from tests.conftest import require

CORA = ["dataset=Cora", "num_clients=3", "partition=metis", "device=cpu"]


class Payload:
    """Unpickling this calls ``Path.touch`` on ``marker``: what an attacker's file would do."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return Path.touch, (self.marker,)


def _crafted(path: Path, marker: Path) -> None:
    torch.save({"round": 1, "server": Payload(marker)}, path)


@require("Cora")
def test_checkpoints_round_trip_and_a_crafted_one_is_refused_unrun(tmp_path):
    config = load_config(None, [*CORA, "algorithm=fedsage+", "fedsage+.gen_rounds=1",
                                "fedsage+.fgen_hidden=[8]"])
    fed = build_federation(config, 0)
    fed.setup()
    fed.fit_round(1)  # the client states now hold a mended graph (PyG Data) and tensors
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, fed, 1, 1.0)
    assert load_checkpoint(path, build_federation(config, 0)) == (1, 1.0)
    marker = tmp_path / "ran"
    _crafted(path, marker)
    with pytest.raises(GraphfedError, match=r"checkpoint .*nothing in it was run"):
        load_checkpoint(path, fed)
    assert not marker.exists()


@require("Cora")
def test_a_crafted_partition_artifact_is_refused_unrun(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHFED_CACHE", str(tmp_path / "cache"))
    from graphfed.build import federated_data

    config = load_config(None, CORA)
    data = federated_data(config, 0)  # builds and saves the artifact
    assert federated_data(config, 0).partition_id == data.partition_id  # and reads it back
    marker = tmp_path / "ran"
    _crafted(artifact_path(data.partition_id), marker)
    with pytest.raises(GraphfedError, match="partition artifact"):
        federated_data(config, 0)
    assert not marker.exists()


@require("Cora")
def test_a_crafted_processed_dataset_file_is_refused_unrun(tmp_path, monkeypatch):
    """PyG's own reader would fall back to full unpickling after its safe read refused it."""
    from graphfed.data.datasets import load_dataset

    monkeypatch.setenv("GRAPHFED_CACHE", str(tmp_path / "cache"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # PyG's "Weights only load failed" warning: none now
        assert load_dataset("Cora").graph.num_nodes == 2708  # builds the processed files
        assert load_dataset("Cora").graph.num_nodes == 2708  # and reads them back
    (processed,) = (tmp_path / "cache").rglob("processed/data.pt")
    marker = tmp_path / "ran"
    _crafted(processed, marker)
    with pytest.raises(GraphfedError, match=r"processed dataset file.*delete"):
        load_dataset("Cora")
    assert not marker.exists()


@require("Cora")
def test_owner_files_load_and_a_swapped_one_is_refused_unrun(tmp_path):
    files = export_partition(load_config(None, CORA), 0, tmp_path / "owners")
    owner = load_owner(files[1])
    assert owner.client_id == 1 and owner.data.graph.num_nodes > 0
    assert all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)  # the owner's eyes only
    marker = tmp_path / "ran"
    _crafted(files[1], marker)
    with pytest.raises(GraphfedError, match="owner file"):
        load_owner(files[1])
    assert not marker.exists()
    old = dataclasses.replace(owner, format_version=0)  # a file from before versioning
    torch.save(old, files[2])
    with pytest.raises(GraphfedError, match="owner file of format 0; this graphfed reads "
                                            "format 1: export the owners' files again"):
        load_owner(files[2])


def test_keys_are_private_from_the_first_byte(tmp_path, monkeypatch):
    pytest.importorskip("cryptography")
    from graphfed.flower.deployment import make_credentials

    opened = []
    real_open = os.open

    def watch(path, flags, mode=0o777, *rest):
        if str(path).endswith(".key"):
            opened.append(mode)
        return real_open(path, flags, mode, *rest)

    monkeypatch.setattr(os, "open", watch)
    (tmp_path / "creds").mkdir()
    stale = tmp_path / "creds" / "owner-0.key"
    stale.write_text("old")
    stale.chmod(0o644)  # an existing world-readable file is narrowed before it is written
    creds = make_credentials(tmp_path / "creds", 2, force=True)
    assert opened == [0o600] * 3  # created 0600, never world-readable for a moment
    for path in (creds.server_key, creds.owner_key(0), creds.owner_key(1)):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_stored_client_state_bytes_are_data_only(tmp_path):
    buffer = io.BytesIO()
    torch.save({"params": {"w": torch.ones(2)}}, buffer)
    state = safe_load(buffer.getvalue(), "client state", graph_classes())
    assert torch.equal(state["params"]["w"], torch.ones(2))
    marker = tmp_path / "ran"
    buffer = io.BytesIO()
    torch.save({"params": Payload(marker)}, buffer)
    with pytest.raises(GraphfedError, match=r"received state .*nothing in it was run"):
        safe_load(buffer.getvalue(), "client state", graph_classes())
    assert not marker.exists()
