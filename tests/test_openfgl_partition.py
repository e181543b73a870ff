"""OpenFGL's subgraph protocol on the staged Cora: its Louvain and METIS clients, each split
class by class, and the ``openfgl-standard`` preset that runs it."""

from __future__ import annotations

import csv

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.data.federated import build_partition
from graphfed.data.partition import parse_partition
from graphfed.data.partition.openfgl import DELTA, chop, deal, default_split
from graphfed.data.partition.plan import TEST, TRAIN, VAL
from graphfed.reproduce import get_preset
from graphfed.reproduce.plan import cell_config, select
from graphfed.reproduce.settings import missing, parse_label
from tests.conftest import error_line, require

CORA_NODES = 2_708


def plan(cora, name: str, clients: int = 10, seed: int = 0, **options):
    return parse_partition({"name": name, **options}).plan(
        cora.graph, cora.graph.y, clients, seed, np.random.default_rng(seed), "Cora")


@pytest.mark.parametrize(("sizes", "delta", "dealt"), [
    # a client takes pieces while its size plus the piece stays below N // K + δ = 12
    # (round-robin dealing would alternate)
    ((4, 4, 4, 4, 2, 2), 2, [[0, 1, 5], [2, 3, 4]]),
    # the cursor closes a client of N // K = 10 nodes or more it lands on, though the next
    # piece would fit (10 + 2 < 13)
    ((5, 5, 2, 2, 2, 2, 1, 1), 3, [[0, 1], [2, 3, 4, 5, 6, 7]]),
])
def test_the_cursor_stays_on_a_client_while_pieces_fit_and_closes_full_ones(sizes, delta,
                                                                           dealt):
    """N = 20 nodes, K = 2 clients."""
    starts = np.cumsum((0, *sizes))
    pieces = [list(range(a, a + n)) for a, n in zip(starts, sizes, strict=False)]
    parts = deal(pieces, 2, 20, delta)
    assert parts == [[v for i in client for v in pieces[i]] for client in dealt]


def test_a_piece_no_open_client_can_take_goes_to_the_smallest():
    parts = deal([list(range(0, 9)), list(range(9, 17)), list(range(17, 23))], 2, 20, 0)
    assert [len(p) for p in parts] == [9, 14]  # 6 fits neither (9 + 6, 8 + 6 >= 10): smallest


def test_chop_cuts_in_node_order_and_orders_equal_pieces_first_pieces_first():
    pieces = chop([[0, 1, 2, 3, 4], [5, 6, 7], [8, 9, 10, 11, 12]], 2)
    assert pieces == [[0, 1], [5, 6], [8, 9], [2, 3], [10, 11], [7], [4], [12]]


@require("Cora")
def test_louvain_clients_tile_cora_below_the_size_cap_with_a_class_stratified_split(cora):
    split = plan(cora, "openfgl_louvain")
    ids = torch.cat(split.client_ids)
    assert len(split.client_ids) == 10 and len(split.global_test) == 0
    assert torch.equal(torch.sort(ids).values, torch.arange(CORA_NODES))  # each node once
    assert all(len(c) < CORA_NODES // 10 + DELTA for c in split.client_ids)
    for client, codes in zip(split.client_ids, split.client_splits, strict=True):
        labels = cora.graph.y[client]
        for label in torch.unique(labels):  # ⌊0.2 n⌋ train, ⌊0.6 n⌋ - ⌊0.2 n⌋ val, per class
            n = int((labels == label).sum())
            got = [int((codes[labels == label] == c).sum()) for c in (TRAIN, VAL, TEST)]
            assert got == [int(0.2 * n), int(0.6 * n) - int(0.2 * n), n - int(0.6 * n)]


@require("Cora")
def test_metis_gives_k_balanced_parts_of_the_whole_graph(cora):
    split = plan(cora, "openfgl_metis", clients=7)
    sizes = [len(c) for c in split.client_ids]
    assert len(sizes) == 7 and sum(sizes) == CORA_NODES
    assert len(torch.unique(torch.cat(split.client_ids))) == CORA_NODES
    assert max(sizes) <= 1.1 * CORA_NODES / 7


@require("Cora")
def test_the_split_shares_are_an_option(cora):
    split = plan(cora, "openfgl_metis", split=(0.5, 0.25, 0.25))
    codes = torch.cat(split.client_splits)
    shares = [float((codes == c).float().mean()) for c in (TRAIN, VAL, TEST)]
    assert shares == pytest.approx([0.5, 0.25, 0.25], abs=0.02)
    assert default_split("Minesweeper") == (0.5, 0.25, 0.25)
    assert default_split("Coauthor-Physics") == (0.2, 0.4, 0.4)


@require("Cora")
@pytest.mark.parametrize("name", ["openfgl_louvain", "openfgl_metis"])
def test_the_same_seed_gives_the_same_clients_and_another_seed_other_ones(cora, name):
    options = parse_partition(name)
    first = build_partition(cora, options, 10, seed=3)
    again = build_partition(cora, options, 10, seed=3)
    other = build_partition(cora, options, 10, seed=4)

    def same(a, b) -> bool:
        return all(torch.equal(x, y) for x, y in zip(a.client_ids + a.client_splits,
                                                     b.client_ids + b.client_splits,
                                                     strict=True))

    assert same(first, again) and not same(first, other)


@require("Cora")
@pytest.mark.parametrize(("overrides", "message"), [
    (["partition=openfgl_louvain", "partition.global_test=0.2"], "no global test set"),
    (["partition=openfgl_louvain", "partition.delta=300"], "lower partition.delta"),
    (["partition=openfgl_metis", "partition.split=[0.0,0.5,0.5]"], "training share"),
    (["partition=openfgl_metis", "dataset=MUTAG"], "node-level datasets"),
    (["partition=openfgl_metis", "num_clients=200", "partition.split=[0.05,0.45,0.5]"],
     "a client got no training node (none of its classes has 20 nodes)"),
    (["partition=openfgl_metis", "partition.split=null", "dataset=Cora_ML"],
     "OpenFGL names no train/val/test shares for Cora_ML"),
])
def test_a_setting_the_protocol_cannot_serve_is_one_line(tmp_path, overrides, message):
    result = CliRunner().invoke(app, ["run", "configs/quickstart.yaml", *overrides, "--out",
                                      str(tmp_path / "r"), "--quiet"])
    assert message in error_line(result)


def test_the_preset_runs_six_datasets_under_both_splits_and_its_configs_validate():
    preset = get_preset("openfgl-standard")
    assert len(preset.datasets) == 12 and preset.select == "max_val_acc" and not preset.paper
    assert {parse_label(d, preset.setting_keys).dataset for d in preset.datasets} == {
        "Cora", "CiteSeer", "Amazon-Photo", "Amazon-Computers", "Coauthor-CS",
        "Coauthor-Physics"}
    assert preset.table_label("Coauthor-CS/partition=metis") == "Coauthor-CS/metis"
    variants, labels = select(preset, None, None)
    for label in labels:
        if missing(parse_label(label, preset.setting_keys).dataset):
            continue
        for variant in variants:
            config = cell_config(preset, variant, label, [0], quick=False)
            assert config.partition.name == "openfgl_" + label.rsplit("=", 1)[1]
            assert (config.num_clients, config.rounds, config.local_epochs) == (10, 100, 3)
            assert config.partition.seed == 0  # one split for every seed, as OpenFGL's


@require("Cora")
def test_a_quick_cell_finishes_and_writes_the_table(tmp_path):
    result = CliRunner().invoke(app, [
        "reproduce", "openfgl-standard", "--methods", "fedavg", "--datasets", "Cora",
        "--settings", "partition=louvain", "--quick", "--seeds", "1", "--set", "rounds=2",
        "--out", str(tmp_path / "r"), "--quiet"])
    assert result.exit_code == 0, result.output
    with (tmp_path / "r" / "table.csv").open() as f:
        (row,) = list(csv.DictReader(f))
    assert (row["method"], row["dataset"], row["metric"]) == ("fedavg", "Cora/louvain",
                                                             "pooled_acc")
    assert 0.3 < float(row["ours_mean"]) <= 1.0 and row["select"] == "max_val_acc"
