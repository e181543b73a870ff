"""A dataset's published split as a partition option (``partition.published_split``): every
client node's role read from the masks, on the clients the partition would draw anyway; and the
``fgl-heterophily`` preset that runs FED-PUB's protocol on the heterophilous sets."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.data import load_dataset
from graphfed.data.federated import build_partition, materialize, partition_params
from graphfed.data.partition import parse_partition
from graphfed.data.partition.plan import TRAIN, UNSPLIT
from graphfed.errors import GraphfedError
from graphfed.reproduce.catalog import get_preset
from graphfed.reproduce.plan import cell_config
from graphfed.reproduce.runner import reproduce
from tests.conftest import error_line, require

SPLITS = ("train", "val", "test")


def published(name: str, split: int | None, **options) -> object:
    return parse_partition({"name": name, "published_split": split, **options})


@pytest.mark.parametrize(("dataset", "partition", "clients"), [
    pytest.param("Texas", "fedpub_disjoint", 5, marks=require("Texas")),
    pytest.param("Chameleon-filtered", "fedpub_overlapping", 10,
                 marks=require("Chameleon-filtered")),
    pytest.param("Minesweeper", "metis", 10, marks=require("Minesweeper")),  # the ratio path
])
def test_every_client_holds_exactly_the_published_masks_on_its_nodes(dataset, partition,
                                                                     clients):
    data = load_dataset(dataset)
    artifact = build_partition(data, published(partition, 3), clients, seed=0)
    fed = materialize(data, artifact)
    holders = torch.zeros(data.graph.num_nodes, dtype=torch.long)
    for client in fed.clients:
        for name, masks in zip(SPLITS, data.splits, strict=True):
            assert torch.equal(getattr(client.graph, f"{name}_mask"),
                               masks[client.global_ids, 3])
        holders[client.global_ids] += 1
    if partition == "fedpub_overlapping":  # a node two clients share has one role for both
        assert int(holders.max()) > 1
    else:  # disjoint clients of these connected graphs: every node, once
        assert bool((holders == 1).all())
    # the same clients as the drawn roles', only the roles differ
    drawn = build_partition(data, parse_partition(partition), clients, seed=0)
    assert all(torch.equal(a, b) for a, b in zip(drawn.client_ids, artifact.client_ids,
                                                 strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(drawn.client_splits,
                                                     artifact.client_splits, strict=True))


@require("Texas")
def test_another_published_split_gives_other_roles_and_another_artifact():
    data = load_dataset("Texas")
    third, fourth = (build_partition(data, published("fedpub_disjoint", i), 5, seed=0)
                     for i in (3, 4))
    assert not all(torch.equal(a, b) for a, b in zip(third.client_splits, fourth.client_splits,
                                                     strict=True))
    assert len({third.id, fourth.id,
                build_partition(data, parse_partition("fedpub_disjoint"), 5, seed=0).id}) == 3
    # unset, the option is not part of the key: every earlier artifact keeps its id
    assert "published_split" not in partition_params(
        "Texas", None, parse_partition("fedpub_disjoint"), 5, 0)["partition"]


@require("Texas")
def test_a_node_in_none_of_the_masks_is_held_in_no_split():
    data = load_dataset("Texas")
    node = 7
    cleared = tuple(m.clone() for m in data.splits)
    for masks in cleared:
        masks[node, 3] = False
    artifact = build_partition(dataclasses.replace(data, splits=cleared),
                               published("fedpub_disjoint", 3), 5, seed=0)
    codes = {n: int(c) for ids, splits in zip(artifact.client_ids, artifact.client_splits,
                                              strict=True)
             for n, c in zip(ids.tolist(), splits, strict=True)}
    assert codes[node] == UNSPLIT
    assert sum(c != UNSPLIT for c in codes.values()) == data.graph.num_nodes - 1


@require("Texas")
def test_a_client_the_published_split_leaves_without_training_nodes_is_refused():
    data = load_dataset("Texas")
    train, val, test = (m.clone() for m in data.splits)
    val[:, 3] |= train[:, 3]
    train[:, 3] = False
    with pytest.raises(GraphfedError, match="client 0 holds no training node"):
        build_partition(dataclasses.replace(data, splits=(train, val, test)),
                        published("fedpub_disjoint", 3), 5, seed=0)
    assert all(bool((c == TRAIN).any()) for c in build_partition(
        data, published("fedpub_disjoint", 3), 5, seed=0).client_splits)


@pytest.mark.parametrize(("overrides", "message"), [
    pytest.param(["dataset=Cora"], "Cora publishes no train/val/test splits",
                 marks=require("Cora")),
    pytest.param(["dataset=Texas", "partition.published_split=10"],
                 "Texas publishes 10 splits, numbered 0 .. 9", marks=require("Texas")),
    pytest.param(["dataset=MUTAG", "partition=uniform"],
                 "MUTAG is a graph-level dataset", marks=require("MUTAG")),
    pytest.param(["dataset=Texas", "partition=louvain", "partition.global_test=0.2"],
                 "leave global_test unset", marks=require("Texas")),
])
def test_a_published_split_that_cannot_be_served_is_one_line(tmp_path, overrides, message):
    args = ["partition", "configs/quickstart.yaml", "num_clients=5", "partition=fedpub_disjoint",
            "partition.published_split=3", *overrides]
    result = CliRunner().invoke(app, args)
    assert message in error_line(result)


HETEROPHILOUS = ("Minesweeper", "Tolokers", "Actor", "Chameleon-filtered", "Squirrel-filtered")


def test_the_heterophily_preset_runs_fedpubs_protocol_on_five_sets_without_paper_numbers():
    preset = get_preset("fgl-heterophily")
    assert preset.datasets == [f"{d}/K=10" for d in HETEROPHILOUS]
    assert preset.paper == {} and preset.seeds == 3 and preset.select == "max_val_acc"
    assert [v.method for v in preset.variants] == [
        v.method for v in get_preset("fedpub-table1").variants]
    for label in preset.datasets:
        for variant in preset.variants:
            config = cell_config(preset, variant, label, [0, 1, 2], quick=False)
            assert (config.partition.name, config.num_clients) == ("fedpub_disjoint", 10)
            assert (config.rounds, config.local_epochs) == (100, 1)


@require("Chameleon-filtered")
def test_one_two_round_cell_of_the_heterophily_preset_writes_its_table(tmp_path):
    out, rows, _ = reproduce("fgl-heterophily", methods=["fedavg"],
                             datasets=["Chameleon-filtered"], seeds=1, out=tmp_path / "h",
                             progress=False, overrides=("rounds=2",))
    table = (out / "table.csv").read_text().splitlines()
    assert len(table) == 2 and table[1].startswith("fedavg,Chameleon-filtered/K=10,local_acc,")
    assert [(r["method"], r["dataset"]) for r in rows] == [("fedavg", "Chameleon-filtered/K=10")]
    assert 0.0 < rows[0]["ours_mean"] < 1.0
