"""Link prediction (``level: edge``) on Cora: each client's edge split keeps its validation and
test edges out of every message-passing graph they must not be in, negatives never coincide with
positives, the split is a function of the seed, the metrics equal scikit-learn's and a direct
count, edges between clients are counted, the one-line refusals, and short runs' summaries."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from sklearn.metrics import average_precision_score, roc_auc_score
from typer.testing import CliRunner

from graphfed.algorithms.registry import load_all
from graphfed.build import config_dataset
from graphfed.cli import app
from graphfed.config import load_config
from graphfed.data.edges import (
    ENUMERATED_PAIRS,
    EdgeOptions,
    edge_report,
    non_edges,
    pair_keys,
    split_edges,
    undirected_pairs,
)
from graphfed.data.federated import EdgeClient
from graphfed.experiment import build_federation, run_experiment
from graphfed.linkpred import hits_at, link_metrics, mean_reciprocal_rank
from graphfed.models.by_level import build_model
from graphfed.models.gnn import ModelOptions
from graphfed.training.batches import PreparedEdgeClient
from tests.conftest import error_line, require

pytestmark = require("Cora")
EDGE = ["dataset=Cora", "level=edge", "num_clients=3", "rounds=2", "device=cpu",
        "model.hidden=16"]


@pytest.fixture(scope="module")
def federation():
    return build_federation(load_config(None, [*EDGE, "partition=louvain", "num_clients=5"]), 0)


def _keys(pairs: torch.Tensor, n: int) -> set[int]:
    return set(pair_keys(pairs, n).tolist())


def test_no_validation_or_test_edge_passes_messages_where_it_is_predicted(federation):
    """Training and validation predictions pass messages over training edges only, test
    predictions over training and validation edges: read back from the prepared graphs the
    encoder runs on (GCN's self-loops aside)."""
    for ctx in federation.runtime.contexts:
        data = ctx.data
        assert isinstance(data, PreparedEdgeClient)
        n = data.num_nodes
        positive = {s: _keys(p, n) for s, p in data.positive.items()}
        assert positive["train"] and positive["val"] and positive["test"]
        for split, allowed in (("train", {"train"}), ("val", {"train"}),
                               ("test", {"train", "val"})):
            g = data.graphs[split]
            passing = _keys(g.edge_index[:, g.edge_index[0] != g.edge_index[1]], n)
            assert passing == set().union(*(positive[s] for s in allowed)), split
            assert not passing & positive["test"]
            if split != "test":
                assert not passing & positive["val"]


def test_negatives_never_coincide_with_positives_nor_each_other(federation):
    for ctx in federation.runtime.contexts:
        data = ctx.data
        n = data.num_nodes
        edges = set().union(*(_keys(p, n) for p in data.positive.values()))
        fixed = {s: data.negative[s] for s in ("val", "test")}
        for split, pairs in fixed.items():
            assert pairs.size(1) == data.num_samples(split)  # one negative per positive
            assert bool((pairs[0] != pairs[1]).all())
            keys = pair_keys(pairs, n).tolist()
            assert len(set(keys)) == len(keys) and not set(keys) & edges
        assert not _keys(fixed["val"], n) & _keys(fixed["test"], n)
        drawn = data.batch_of("train")  # fresh training negatives
        negatives = drawn.pairs[:, ~drawn.y]
        assert negatives.size(1) > 0
        assert not _keys(negatives, n) & _keys(data.positive["train"], n)


@pytest.mark.parametrize("nodes", [300, 1500])
def test_drawn_non_edges_are_distinct_pairs_outside_the_forbidden(nodes):
    """Both ways of drawing: every free pair listed (300 nodes), and by rejection (1,500)."""
    assert (nodes * (nodes - 1) // 2 > ENUMERATED_PAIRS) == (nodes == 1500)
    edges = torch.randint(nodes, (2, 4 * nodes), generator=torch.Generator().manual_seed(0))
    forbidden = pair_keys(undirected_pairs(edges, nodes), nodes)
    drawn = non_edges(nodes, forbidden, 500, torch.Generator().manual_seed(1))
    keys = pair_keys(drawn, nodes)
    assert drawn.size(1) == 500 and bool((drawn[0] < drawn[1]).all())
    assert len(keys.unique()) == 500 and not bool(torch.isin(keys, forbidden).any())
    again = non_edges(nodes, forbidden, 500, torch.Generator().manual_seed(1))
    assert torch.equal(drawn, again)


def test_the_split_is_a_function_of_the_seed(federation):
    client = federation.data.clients[0]
    assert isinstance(client, EdgeClient)

    def split(seed: int):
        return split_edges(client.graph, EdgeOptions(), torch.Generator().manual_seed(seed))

    a, b, other = split(1), split(1), split(2)
    for s in ("train", "val", "test"):
        assert torch.equal(a.positive[s], b.positive[s])
    assert torch.equal(a.negative["test"], b.negative["test"])
    assert not torch.equal(a.positive["test"], other.positive["test"])
    assert not torch.equal(a.negative["test"], other.negative["test"])
    # every edge of the client in exactly one split, 85/5/10 rounded down
    n, count = client.num_nodes, sum(a.positive[s].size(1) for s in a.positive)
    assert set().union(*(_keys(p, n) for p in a.positive.values())) == _keys(
        client.graph.edge_index, n)
    assert (a.positive["val"].size(1), a.positive["test"].size(1)) == (
        int(0.05 * count), int(0.10 * count))
    # and the run rebuilds it from its seed
    again = build_federation(federation.config, 0).data.clients[0]
    assert torch.equal(again.edges.positive["test"], client.edges.positive["test"])


@pytest.mark.parametrize("ties", [False, True])
def test_auc_and_ap_equal_scikit_learns_on_random_scores(ties):
    rng = np.random.default_rng(0)
    scores = rng.normal(size=300)
    if ties:
        scores = np.round(scores, 1)
    labels = rng.random(300) < 0.4
    m = link_metrics(torch.tensor(scores), torch.tensor(labels))
    assert m["auc"] == pytest.approx(roc_auc_score(labels, scores), abs=1e-12)
    assert m["ap"] == pytest.approx(average_precision_score(labels, scores), abs=1e-12)
    expected = torch.nn.functional.binary_cross_entropy_with_logits(
        torch.tensor(scores), torch.tensor(labels, dtype=torch.float64))
    assert m["loss"] == pytest.approx(float(expected)) and m["n"] == labels.sum()


def test_hits_and_mrr_equal_a_direct_count():
    pos = np.array([5.0, 3.0, 1.0, 0.5])
    neg = np.array([4.0, 3.0, 2.0, 0.0])
    # the 2nd highest negative is 3: positives strictly above it are 5 only
    assert hits_at(pos, neg, 2) == 0.25
    assert hits_at(pos, neg, 3) == 0.5  # above 2: 5 and 3
    assert hits_at(pos, neg, 5) == 1.0  # fewer negatives than K: OGB counts every positive
    # negatives >= each positive: 0, 2 (4 and 3), 3, 3 -> ranks 1, 3, 4, 4
    assert mean_reciprocal_rank(pos, neg) == pytest.approx((1 + 1 / 3 + 1 / 4 + 1 / 4) / 4)
    m = link_metrics(torch.tensor([*pos, *neg]), torch.tensor([True] * 4 + [False] * 4))
    assert m["hits@20"] == 1.0 and m["mrr"] == pytest.approx(mean_reciprocal_rank(pos, neg))


def test_edges_between_clients_are_counted(federation):
    data, graph = federation.data, config_dataset(federation.config).graph
    owner = torch.full((graph.num_nodes,), -1)
    for i, client in enumerate(data.clients):
        owner[client.global_ids] = i
    src, dst = graph.edge_index[:, graph.edge_index[0] < graph.edge_index[1]]
    across = int((owner[src] != owner[dst]).sum())
    report = edge_report(data, graph)
    assert report["edges"] == int((graph.edge_index[0] < graph.edge_index[1]).sum())
    assert report["edges_lost"] == across > 0
    assert report["edges_lost_share"] == pytest.approx(across / report["edges"])
    assert report["test_edges"] == sum(c.num_samples("test") for c in data.clients)


def test_the_link_predictor_shares_the_classifiers_layer_stack():
    opts = ModelOptions(hidden=32, embedding=16)
    classifier = build_model("node", 100, 7, opts)
    link = build_model("edge", 100, 7, opts)
    mlp = build_model("edge", 100, 7, opts.model_copy(update={"decoder": "hadamard_mlp"}))
    assert [k for k in dict(classifier.named_parameters())] == [
        k for k in dict(link.named_parameters())]
    assert dict(link.named_parameters())["convs.1.lin.weight"].shape == (16, 32)
    assert {k.split(".")[0] for k, _ in mlp.named_parameters()} == {"convs", "decoder"}
    x, edges = torch.randn(5, 100), torch.tensor([[0, 1, 2], [1, 2, 3]])
    pairs = torch.tensor([[0, 3], [4, 1]])
    link.eval()
    z = link.nodes(x, edges, None)
    assert torch.allclose(link(x, edges, None, pairs), (z[pairs[0]] * z[pairs[1]]).sum(-1))
    assert torch.allclose(link(x, edges, None, pairs), link(x, edges, None, pairs.flip(0)))


@pytest.mark.parametrize("overrides, says", [
    (["algorithm=fedsage+"], "is for node-level tasks but this run (dataset 'Cora', "
                             "level=edge) is edge-level"),
    (["dataset=MUTAG"], "level=edge predicts the edges of a node-level dataset"),
    (["batch_size=64"], "leave batch_size unset"),
    (["level=node", "model.decoder=hadamard_mlp"], "apply at level=edge only"),
    (["level=node", "edges.val=0.2"], "applies at level=edge only"),
    (["edges.val=0.5", "edges.test=0.5"], "leaves no training edge"),
    (["partition.global_test=0.2"], "leave partition.global_test unset"),
])
def test_what_the_edge_level_cannot_run_is_refused_in_one_line(tmp_path, overrides, says):
    result = CliRunner().invoke(app, ["run", *EDGE, *overrides, "--out", str(tmp_path / "r"),
                                      "--quiet"])
    assert says in error_line(result)
    assert not (tmp_path / "r").exists()


CONTRACT = ("test_auc", "test_ap", "test_hits@50", "test_mrr", "val_auc", "val_loss_pooled",
            "test_auc_pooled", "test_ap_pooled", "test_hits@50_pooled", "test_mrr_pooled")


@pytest.mark.parametrize("algorithm", ["fedavg", "local"])
def test_two_rounds_write_the_contract_keys(tmp_path, algorithm):
    config = load_config(None, [*EDGE, f"algorithm={algorithm}", "partition=louvain"])
    run_dir, _ = run_experiment(config, tmp_path, progress=False)
    summary = json.loads((run_dir / "seed-0" / "summary.json").read_text())
    final = summary["final"]
    assert set(CONTRACT) <= set(final), sorted(final)
    assert all(0.0 <= final[k] <= 1.0 for k in CONTRACT if k != "val_loss_pooled")
    assert summary["edges"]["edges_lost"] > 0
    assert summary["heterogeneity"]["edges_lost"] == pytest.approx(
        summary["edges"]["edges_lost_share"])
    assert "test_acc" not in final


def test_algorithms_json_lists_each_levels():
    result = CliRunner().invoke(app, ["algorithms", "--json"])
    assert result.exit_code == 0, result.output
    rows = {row["name"]: row for row in json.loads(result.stdout)}
    assert rows.keys() == load_all().keys()
    assert "edge" in rows["fedavg"]["levels"] and "edge" not in rows["fedsage+"]["levels"]


def test_the_linkpred_preset_reports_each_seed_at_its_best_validation_auc_round(tmp_path):
    """``linkpred-standard``: every method that declares the edge level (FedAvg, FedProx, Local
    first) beside a centralised row of one client, and each number read at the evaluated round
    of highest client-mean validation AUC."""
    from graphfed.reproduce import get_preset, reproduce
    from graphfed.reproduce.selection import evaluated, selected_round

    preset = get_preset("linkpred-standard")
    methods = [v.method for v in preset.variants]
    assert set(methods) == {n for n, a in load_all().items() if "edge" in a.levels} | {
        "centralised"}
    assert methods[1:4] == ["fedavg", "fedprox", "local"] and not preset.paper
    out, rows, skipped = reproduce("linkpred-standard", methods=["centralised", "fedavg"],
                                   datasets=["Cora"], settings=["partition=louvain"], seeds=1,
                                   quick=True, overrides=("rounds=4", "eval_every=2"),
                                   out=tmp_path / "r", progress=False)
    assert not skipped
    run = out / "runs" / "fedavg-Cora_partition=louvain"
    rounds = evaluated([json.loads(x) for x in
                        (run / "seed-0" / "metrics.jsonl").read_text().splitlines()])
    best = selected_round("max_val_auc", rounds, "test_auc_pooled")
    assert best["val_auc"] == max(r["val_auc"] for r in rounds)
    fedavg = next(r for r in rows if r["method"] == "fedavg" and r["metric"] == "pooled_auc")
    assert fedavg["ours_mean"] == pytest.approx(best["test_auc_pooled"])
    central = yaml.safe_load((out / "runs" / "centralised-Cora_partition=louvain"
                              / "config.yaml").read_text())
    assert central["num_clients"] == 1 and central["level"] == "edge"
