"""The heterogeneity card: each measure against a count by hand on a six-node partition, the
kernel two-sample statistic on samples whose answer is known, the card of real partitions
ordered as their construction says it must be, and the card where the commands show it
(``graphfed partition``, a run's ``summary.json``, ``graphfed report``)."""

import json
import math

import numpy as np
import pytest
import torch
from torch_geometric.data import Data
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.data.datasets import GraphDataset
from graphfed.data.federated import PartitionArtifact, materialize
from graphfed.data.heterogeneity import CARD_KEYS, card, card_path, gini, mean_pairwise_mmd
from tests.conftest import error_line, require

runner = CliRunner()


@pytest.fixture(autouse=True)
def wide_console(monkeypatch):
    """200 columns, so that a number checked in a table is not wrapped in its cell."""
    from graphfed.cli import common

    monkeypatch.setattr(common.console, "width", 200)

# six nodes, labels 0 0 1 1 1 0, six undirected edges (both directions stored, as PyG does)
LABELS = [0, 0, 1, 1, 1, 0]
EDGES = [(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (2, 3)]


def tiny(clients: list[list[int]], test: list[int]):
    """The six-node graph split into ``clients`` (node lists, all training nodes) with the
    global test nodes ``test``, materialised as a run would: the data and its source."""
    directed = EDGES + [(v, u) for u, v in EDGES]
    graph = Data(x=torch.tensor([[0.0, 1.0], [1.0, 0.0], [2.0, 2.0], [0.0, 3.0], [1.0, 1.0],
                                 [3.0, 0.0]]),
                 edge_index=torch.tensor(directed).T, y=torch.tensor(LABELS))
    source = GraphDataset("Tiny", "node", 2, 2, graph=graph)
    ids = [torch.tensor(c) for c in clients]
    artifact = PartitionArtifact("tiny-hand", {}, "node", ids,
                                 [torch.zeros(len(c), dtype=torch.int8) for c in clients],
                                 torch.tensor(test, dtype=torch.long))
    return materialize(source, artifact), source


def kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log2(a / b) for a, b in zip(p, q, strict=True) if a > 0)


def js(p: list[float], q: list[float]) -> float:
    m = [(a + b) / 2 for a, b in zip(p, q, strict=True)]
    return kl(p, m) / 2 + kl(q, m) / 2


def test_every_measure_matches_a_count_by_hand_on_overlapping_clients():
    """Client A holds nodes 0-3, B nodes 3-4 (node 3 in both), node 5 is the global test."""
    data, source = tiny([[0, 1, 2, 3], [3, 4]], [5])
    result = card(data, source)
    assert list(result) == list(CARD_KEYS)
    assert result["clients"] == 2
    # sizes 4 and 2: Σ_i Σ_j |n_i − n_j| = 4, over 2 K² n̄ = 2·4·3
    assert result["size_gini"] == pytest.approx(4 / 24)
    # A's labels 0 0 1 1, B's 1 1; the union of nodes 0-4 (node 3 once): 0 0 1 1 1
    a, b, union = [0.5, 0.5], [0.0, 1.0], [0.4, 0.6]
    assert result["label_jsd_mean"] == pytest.approx(js(a, b))
    assert result["label_jsd_mean"] == pytest.approx(
        (0.5 * 1 + 0.5 * math.log2(2 / 3)) / 2 + math.log2(4 / 3) / 2)
    assert result["label_jsd_to_global"] == pytest.approx((js(a, union) + js(b, union)) / 2)
    # A holds edges 0-1 (same label), 1-2, 0-2 (differ), 2-3 (same): 2/4; B holds 3-4: 1/1
    assert result["homophily_mean"] == pytest.approx(0.75)
    assert result["homophily_std"] == pytest.approx(0.25)
    # only 4-5 is in no client (5 is the global test node): 1 edge of 6
    assert result["edges_lost"] == pytest.approx(1 / 6)
    # five nodes held, node 3 by both clients
    assert result["overlap"] == pytest.approx(1 / 5)
    x = source.graph.x.numpy()  # fewer nodes than the sample size: every node is the sample
    assert result["feature_mmd"] == pytest.approx(mean_pairwise_mmd([x[[0, 1, 2, 3]], x[[3, 4]]]))


def test_a_disjoint_partition_counts_cut_edges_and_has_no_overlap():
    data, source = tiny([[0, 1, 2], [3, 4, 5]], [])
    result = card(data, source)
    assert result["size_gini"] == 0.0 and result["overlap"] is None
    assert result["edges_lost"] == pytest.approx(1 / 6)  # 2-3 joins the two clients
    # A: 0-1 same, 1-2 and 0-2 differ (1/3); B: 3-4 same, 4-5 differs (1/2)
    assert result["homophily_mean"] == pytest.approx(5 / 12)
    assert result["homophily_std"] == pytest.approx(1 / 12)
    assert result["label_jsd_mean"] == pytest.approx(js([2 / 3, 1 / 3], [1 / 3, 2 / 3]))
    one, _ = tiny([[0, 1, 2, 3, 4, 5]], [])
    alone = card(one, source)  # one client: no pair, the whole graph, the global distribution
    assert alone["label_jsd_mean"] is None and alone["feature_mmd"] is None
    assert alone["label_jsd_to_global"] == 0.0 and alone["edges_lost"] == 0.0


def test_gini_by_its_definition():
    sizes = np.array([1, 2, 3, 10])
    by_pairs = np.abs(sizes[:, None] - sizes[None, :]).sum() / (2 * len(sizes) ** 2
                                                                * sizes.mean())
    assert gini(sizes) == pytest.approx(by_pairs)
    assert gini(np.array([5, 5, 5])) == 0.0
    assert gini(np.array([0, 0, 0, 8])) == pytest.approx(3 / 4)  # (K − 1)/K: one holds all


def test_mmd_is_zero_for_identical_samples_and_grows_with_a_shift():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(100, 5))
    assert mean_pairwise_mmd([x, x.copy()]) == pytest.approx(0.0, abs=1e-6)
    near, far = mean_pairwise_mmd([x, x + 0.5]), mean_pairwise_mmd([x, x + 2.0])
    assert 0 < near < far
    # by hand: X = {0, 1}, Y = {3}; squared distances 1, 9, 4, median 4, k = exp(−d² / 8)
    expected = (2 + 2 * math.exp(-1 / 8)) / 4 + 1 - 2 * (math.exp(-9 / 8) + math.exp(-4 / 8)) / 2
    assert mean_pairwise_mmd([np.array([[0.0], [1.0]]), np.array([[3.0]])]) == pytest.approx(
        expected, rel=1e-6)


def cora_card(partition: str, *extra: str) -> dict:
    from graphfed.build import config_dataset, federated_data
    from graphfed.config import load_config

    config = load_config(None, ["dataset=Cora", f"partition={partition}", "num_clients=10",
                                *extra])
    return card(federated_data(config, 0), config_dataset(config))


@require("Cora")
def test_label_skew_partitions_read_as_skewed_and_community_cuts_keep_edges():
    """Dirichlet(0.1) deals each class to few clients by design, so its label divergence and
    size skew exceed METIS's balanced min-cut parts, which in turn lose far fewer edges."""
    metis, louvain, dirichlet = (cora_card("metis"), cora_card("louvain"),
                                 cora_card("dirichlet", "partition.alpha=0.1"))
    assert dirichlet["label_jsd_mean"] > metis["label_jsd_mean"]
    assert dirichlet["label_jsd_to_global"] > metis["label_jsd_to_global"]
    assert dirichlet["size_gini"] > metis["size_gini"]
    assert dirichlet["edges_lost"] > 2 * max(metis["edges_lost"], louvain["edges_lost"])
    for result in (metis, louvain, dirichlet):
        assert result["clients"] == 10 and result["overlap"] is None
        assert 0 <= result["label_jsd_mean"] <= 1 and result["feature_mmd"] > 0
        assert 0 < result["homophily_mean"] <= 1 and result["homophily_std"] >= 0


@require("MUTAG")
def test_a_graph_level_card_has_no_structure_measures():
    from graphfed.build import config_dataset, federated_data
    from graphfed.config import load_config

    config = load_config(None, ["dataset=MUTAG", "model=gin", "partition=dirichlet",
                                "num_clients=3"])
    result = card(federated_data(config, 0), config_dataset(config))
    assert result["clients"] == 3 and result["feature_mmd"] > 0
    assert 0 < result["label_jsd_mean"] <= 1
    assert all(result[k] is None for k in ("homophily_mean", "homophily_std", "edges_lost",
                                           "overlap"))


@require("Cora")
def test_partition_prints_the_card_and_a_reload_reads_it(monkeypatch):
    args = ["partition", "dataset=Cora", "partition=metis", "num_clients=4", "--json"]
    shown = json.loads(runner.invoke(app, args).stdout)
    assert set(shown) == {*CARD_KEYS, "rows"}
    assert shown["clients"] == len(shown["rows"]) == 4 and shown["overlap"] is None
    assert sum(r["samples"] for r in shown["rows"]) == 2708

    def computed_again(*_):
        raise AssertionError("the stored card was computed again")

    monkeypatch.setattr("graphfed.data.heterogeneity.card", computed_again)
    again = runner.invoke(app, args)
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout) == shown
    table = runner.invoke(app, args[:-1])
    assert "heterogeneity of the partition" in table.output
    assert "label_jsd_mean" in table.output and f"{shown['label_jsd_mean']:.4f}" in table.output


@require("Cora")
def test_a_damaged_stored_card_is_computed_again():
    from graphfed.build import config_dataset, federated_data
    from graphfed.config import load_config
    from graphfed.data.heterogeneity import stored_card

    config = load_config(None, ["dataset=Cora", "partition=metis", "num_clients=3"])
    data = federated_data(config, 0)
    first = stored_card(data, config_dataset(config), config.features)
    path = card_path(data.partition_id, config.features)
    path.write_text('{"version": 1, "card": {"clients": "many"}}')
    assert stored_card(data, config_dataset(config), config.features) == first
    assert json.loads(path.read_text())["card"] == first


@require("Cora")
def test_a_run_summary_holds_the_card_and_report_prints_it(tmp_path):
    from graphfed.build import config_dataset, federated_data
    from graphfed.config import load_config
    from graphfed.experiment import run_experiment

    config = load_config("configs/quickstart.yaml", ["rounds=2", "num_clients=3",
                                                     "name=card"])
    run_dir, summary = run_experiment(config, tmp_path, progress=False)
    expected = card(federated_data(config, 0), config_dataset(config))
    assert summary["heterogeneity"] == pytest.approx(expected)
    on_disk = json.loads((run_dir / "summary.json").read_text())
    seed = json.loads((run_dir / "seed-0" / "summary.json").read_text())
    assert on_disk["heterogeneity"] == seed["heterogeneity"] == summary["heterogeneity"]
    shown = runner.invoke(app, ["report", str(run_dir)])
    assert shown.exit_code == 0, shown.output
    assert "heterogeneity of the partition" in shown.output
    assert f"{expected['size_gini']:.4f}" in shown.output
    on_disk["heterogeneity"] = {"clients": "three"}
    (run_dir / "summary.json").write_text(json.dumps(on_disk))
    assert "is not a heterogeneity card" in error_line(
        runner.invoke(app, ["report", str(run_dir)]))
