"""FedGTA: its aggregation weights (rows sum to 1, only clients with similar moments, in
proportion to their smoothing confidence), an unreachable similarity threshold reducing it to
Local, and its label propagation, moments and confidence, on Cora clients."""

import math

import pytest
import torch
from typer.testing import CliRunner

from graphfed.algorithms.personalized.fedgta import (
    ClientGraph,
    aggregation_weights,
    mixed_moments,
    propagate_labels,
    smoothing_confidence,
)
from graphfed.cli import app
from graphfed.mechanisms.client_network import cosine_similarities
from tests.conftest import error_line, evaluated_after, require

CORA = ["dataset=Cora", "partition=metis", "num_clients=5", "device=cpu", "engine=sequential"]


@pytest.fixture(scope="module")
def one_round():
    """A FedGTA federation after one round, and each client's moments and confidence."""
    runtime, _ = evaluated_after(["algorithm=fedgta", *CORA], rounds=1)
    stats = [runtime.client.statistics(ctx.state["params"], ctx) for ctx in runtime.contexts]
    moments = torch.stack([m.to(torch.float64) for m, _ in stats])
    confidence = torch.tensor([h for _, h in stats], dtype=torch.float64)
    return runtime, moments, confidence


@require("Cora")
def test_server_weights_sum_to_one_over_similar_clients_by_confidence(one_round):
    runtime, moments, confidence = one_round
    similarity = cosine_similarities(moments)
    weights = torch.tensor(runtime.server.last["weights"], dtype=torch.float64)
    assert torch.allclose(weights, aggregation_weights(similarity, confidence, 0.5))
    assert torch.allclose(weights.sum(dim=1), torch.ones(5, dtype=torch.float64))
    accepted = (similarity > 0.5) | torch.eye(5, dtype=torch.bool)
    assert torch.equal(weights > 0, accepted)
    for i in range(5):  # within a row, weights are proportional to the accepted h_j
        row = accepted[i]
        assert torch.allclose(weights[i, row], confidence[row] / confidence[row].sum())


@require("Cora")
def test_weights_favour_similar_clients(one_round):
    """With the threshold at the median similarity, each client keeps only the more similar
    half of the others: a client less similar to i than one i accepted never gets weight."""
    _, moments, confidence = one_round
    similarity = cosine_similarities(moments)
    off = similarity[~torch.eye(5, dtype=torch.bool)]
    threshold = float(off.median())
    weights = aggregation_weights(similarity, confidence, threshold)
    assert 0 < int((weights > 0).sum()) - 5 < 20  # some pairs accepted, some refused
    for i in range(5):
        kept = [j for j in range(5) if j != i and weights[i, j] > 0]
        dropped = [j for j in range(5) if j != i and weights[i, j] == 0]
        assert all(similarity[i, k] > similarity[i, d] for k in kept for d in dropped)
    assert (confidence > 0).all()


def test_edgeless_clients_fall_back_to_uniform_weights():
    similarity = torch.tensor([[1.0, 0.9, 0.1], [0.9, 1.0, 0.2], [0.1, 0.2, 1.0]])
    weights = aggregation_weights(similarity, torch.zeros(3), 0.5)
    assert torch.equal(weights, torch.tensor([[0.5, 0.5, 0.0], [0.5, 0.5, 0.0],
                                              [0.0, 0.0, 1.0]], dtype=torch.float64))


@require("Cora")
def test_an_unreachable_threshold_is_local():
    """γ = 1: no other client's moments are similar enough, every client is sent its own
    trained model back, and the federation evaluates as Local, to the bit."""
    _, records = evaluated_after(["algorithm=fedgta", "fedgta.accept=1", *CORA])
    _, local = evaluated_after(["algorithm=local", *CORA])
    assert records == local


@require("Cora")
def test_moments_confidence_and_propagation_on_a_client_graph(one_round):
    runtime, _, _ = one_round
    ctx = runtime.contexts[0]
    g = ClientGraph(ctx.data, 7, torch.device("cpu"))
    n = len(g.nodes)
    # moments: the first origin moment is the class mean, the first central one zero, the
    # second central one the (biased) variance
    q = torch.softmax(torch.randn(n, 7, generator=torch.Generator().manual_seed(0)), dim=1)
    m = mixed_moments(q, 3, "hybrid").view(2, 3, 7)
    q64 = q.double()
    assert torch.allclose(m[0, 0], q64.mean(0))
    assert torch.allclose(m[1, 0], torch.zeros(7, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(m[1, 1], q64.var(0, unbiased=False))
    # confidence: Σ d (C/e − H): largest for one-hot rows, C/e − log C per degree for uniform
    degree_sum = float(g.degree.sum())
    uniform = torch.full((n, 7), 1 / 7)
    assert smoothing_confidence(uniform, g.degree) == pytest.approx(
        degree_sum * (7 / math.e - math.log(7)))
    sharp = torch.nn.functional.one_hot(torch.arange(n) % 7, 7).float()
    assert smoothing_confidence(sharp, g.degree) == pytest.approx(degree_sum * 7 / math.e,
                                                                  rel=1e-6)
    assert 0 < smoothing_confidence(uniform, g.degree) < smoothing_confidence(q, g.degree)
    # propagation: α = 0 keeps the start; α = 1 applies Â, D̃^(−1/2) Ã D̃^(−1/2), K times
    a = torch.zeros(n, n, dtype=torch.float64)
    a[g.edge_index[1], g.edge_index[0]] = g.edge_weight.double()
    edges = ctx.data.graph.edge_index
    looped = torch.eye(n, dtype=torch.float64)
    looped[edges[1], edges[0]] = 1.0
    norm = looped.sum(dim=1).rsqrt()
    assert torch.allclose(a, norm[:, None] * looped * norm[None, :])
    assert torch.equal(propagate_labels(q, g.edge_index, g.edge_weight, 5, 0.0), q)
    twice = propagate_labels(q, g.edge_index, g.edge_weight, 2, 1.0).double()
    assert torch.allclose(twice, a @ a @ q64, atol=1e-6)
    mixed = propagate_labels(q, g.edge_index, g.edge_weight, 1, 0.5, g.train_rows).double()
    expected = 0.5 * a @ q64 + 0.5 * q64 + g.train_rows.double() * q64
    assert torch.allclose(mixed, expected, atol=1e-6)


def test_graph_level_is_refused():
    result = CliRunner().invoke(app, ["run", "algorithm=fedgta", "dataset=MUTAG"])
    assert "fedgta" in error_line(result)
