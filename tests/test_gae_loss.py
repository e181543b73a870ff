"""``edges.loss: full``, GAE's re-weighted reconstruction of every node pair (Kipf & Welling
2016): the loss a client trains with equals a hand count on a small Cora subgraph, the batched
engine leaves such clients to the sequential one, a short federated run trains with it, and its
bad values are refused in one line."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import k_hop_subgraph
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.config import load_config
from graphfed.data import edges as edges_module
from graphfed.data.edges import EdgeOptions, client_generator, split_edges
from graphfed.data.federated import EdgeClient
from graphfed.experiment import run_experiment
from graphfed.models.gnn import ModelOptions
from graphfed.models.link import LinkPredictor
from graphfed.training.batched import batch_refusal
from graphfed.training.batches import PreparedEdgeClient
from graphfed.training.trainer import OptimizerOptions, Trainer
from tests.conftest import error_line, require

pytestmark = require("Cora")
EDGE = ["dataset=Cora", "level=edge", "num_clients=1", "partition=uniform", "rounds=1",
        "device=cpu", "model.hidden=16", "edges.loss=full"]


def _subgraph_client(cora, loss: str) -> EdgeClient:
    """Node 2's two-hop neighbourhood of Cora (80 nodes, 101 edges), its edges split as one
    client's."""
    nodes, edge_index, _, _ = k_hop_subgraph(2, 2, cora.graph.edge_index, relabel_nodes=True)
    graph = Data(x=cora.graph.x[nodes], edge_index=edge_index, y=cora.graph.y[nodes])
    split = split_edges(graph, EdgeOptions(loss=loss), client_generator(0, 0))
    return EdgeClient(graph, nodes, 0, edges=split)


def _hand_loss(z: list[list[float]], train_edges: list[tuple[int, int]]) -> float:
    """GAE's cost as its authors' code sets it, counted pair by pair: norm times the mean over
    all N² ordered pairs of the cross-entropy, the terms of the adjacency's ones (training
    edges both ways and the diagonal) weighted by pos_weight, with P the ones off the
    diagonal."""
    n = len(z)
    ones = {(u, v) for u, v in train_edges} | {(v, u) for u, v in train_edges}
    p = len(ones)
    pos_weight = (n * n - p) / p
    norm = n * n / (2 * (n * n - p))
    total = 0.0
    for i in range(n):
        for j in range(n):
            s = sum(a * b for a, b in zip(z[i], z[j], strict=True))
            if i == j or (i, j) in ones:
                total += pos_weight * math.log1p(math.exp(-s))
            else:
                total += math.log1p(math.exp(s))
    return norm * total / (n * n)


def test_the_full_loss_a_client_trains_with_equals_a_hand_count(cora):
    client = _subgraph_client(cora, "full")
    assert client.num_nodes == 80 and client.num_samples("train") == 101 - 5 - 10
    torch.manual_seed(0)
    model = LinkPredictor(cora.num_features, ModelOptions(hidden=16, embedding=8, dropout=0.0))
    trainer = Trainer(model, OptimizerOptions(), num_classes=2)
    data = PreparedEdgeClient(client, model, torch.device("cpu"))
    params = trainer.initial_params()
    _, stats = trainer.train(params, data, epochs=1, batch_size=None)
    model.eval()
    graph = data.graphs["train"]
    z = model.nodes(graph.x, graph.edge_index, graph.edge_weight).double().tolist()
    train = [tuple(e) for e in client.edges.positive["train"].t().tolist()]
    assert stats.loss == pytest.approx(_hand_loss(z, train), rel=1e-5)
    assert stats.steps == 1


def test_the_sampled_loss_is_not_the_full_one(cora):
    """The hand count tells the two losses apart: the default still trains on sampled pairs."""
    client = _subgraph_client(cora, "sampled")
    torch.manual_seed(0)
    model = LinkPredictor(cora.num_features, ModelOptions(hidden=16, embedding=8, dropout=0.0))
    trainer = Trainer(model, OptimizerOptions(), num_classes=2)
    data = PreparedEdgeClient(client, model, torch.device("cpu"))
    _, stats = trainer.train(trainer.initial_params(), data, epochs=1, batch_size=None)
    graph = data.graphs["train"]
    z = model.nodes(graph.x, graph.edge_index, graph.edge_weight).double().tolist()
    train = [tuple(e) for e in client.edges.positive["train"].t().tolist()]
    assert data.adjacency is None
    assert stats.loss != pytest.approx(_hand_loss(z, train), rel=1e-2)


def test_full_loss_clients_train_on_the_sequential_engine(cora):
    assert load_config(None, EDGE).engine == "sequential"
    client = _subgraph_client(cora, "full")
    model = LinkPredictor(cora.num_features, ModelOptions(hidden=16))
    trainer = Trainer(model, OptimizerOptions(), num_classes=2)
    data = PreparedEdgeClient(client, model, torch.device("cpu"))
    assert "edges.loss=full" in (batch_refusal(trainer, data) or "")


def test_a_federated_run_trains_with_the_full_loss(tmp_path):
    config = load_config(None, [*EDGE, "num_clients=3", "partition=louvain", "rounds=2",
                                "local_epochs=2"])
    run_dir, _ = run_experiment(config, tmp_path, progress=False)
    summary = json.loads((run_dir / "seed-0" / "summary.json").read_text())
    assert 0.5 < summary["final"]["test_auc"] <= 1.0


@pytest.mark.parametrize("overrides, says", [
    (["edges.loss=all"], "edges.loss"),
    (["edges.train_negatives=5"], "edges.loss=full scores every node pair and draws none"),
    (["model.decoder=hadamard_mlp"], "use model.decoder=inner"),
    (["level=node"], "applies at level=edge only"),
])
def test_bad_full_loss_settings_are_refused_in_one_line(tmp_path, overrides, says):
    result = CliRunner().invoke(app, ["run", *EDGE, *overrides, "--out", str(tmp_path / "r"),
                                      "--quiet"])
    assert says in error_line(result)


def test_a_client_above_the_node_bound_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(edges_module, "FULL_LOSS_NODES", 1000)
    result = CliRunner().invoke(app, ["run", *EDGE, "--out", str(tmp_path / "r"), "--quiet"])
    assert "up to 1,000 nodes; a client here has 2,708" in error_line(result)
