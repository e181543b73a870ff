"""FedTAD: its topology-aware reliabilities on Cora clients (landing probabilities, the mean
neighbour similarity, per-class sums, their normalisation), its pseudo graph, and its
distillation (nothing distilled is FedAvg; a client of zero reliability teaches nothing; the
student steps bring the global model closer to the teachers)."""

from contextlib import contextmanager

import pytest
import torch
import torch.nn.functional as F
from typer.testing import CliRunner

from graphfed.algorithms.averaging.fedtad import reliability
from graphfed.algorithms.averaging.fedtad.distillation import (
    Distiller,
    knn_edges,
    pseudo_labels,
)
from graphfed.algorithms.averaging.fedtad.reliability import (
    class_reliability,
    landing_probabilities,
    node_reliability,
    normalised_reliability,
)
from graphfed.cli import app
from tests.conftest import error_line, evaluated_after, require

CORA = ["dataset=Cora", "partition=metis", "num_clients=5", "device=cpu", "engine=sequential"]


@pytest.fixture(scope="module")
def one_round():
    """A FedTAD federation on five Cora clients after one round."""
    runtime, _ = evaluated_after(["algorithm=fedtad", *CORA], rounds=1)
    return runtime


@require("Cora")
def test_landing_probabilities_are_the_diagonals_of_the_walk_matrix_powers(one_round,
                                                                             monkeypatch):
    ctx = one_round.contexts[0]
    graph = ctx.data.graph
    n = graph.num_nodes
    looped = torch.eye(n, dtype=torch.float64)
    looped[graph.edge_index[0], graph.edge_index[1]] = 1.0
    walk = looped / looped.sum(dim=1, keepdim=True)  # T = D̃⁻¹Ã
    expected = torch.stack([torch.linalg.matrix_power(walk, k).diagonal()
                            for k in range(1, 6)], dim=1)
    monkeypatch.setattr(reliability, "CHUNK", 7)  # walks started in many chunks
    got = landing_probabilities(graph.edge_index, n, 5)
    assert torch.allclose(got, expected, atol=1e-12)
    assert torch.allclose(got[:, 0], 1.0 / looped.sum(dim=1))  # one step: back with 1/d̃


@require("Cora")
def test_node_reliability_is_the_mean_similarity_over_itself_and_its_neighbours(one_round):
    graph = one_round.contexts[1].data.graph
    h = torch.randn(graph.num_nodes, 6, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(0))
    r = node_reliability(h, graph.edge_index)
    for v in range(0, graph.num_nodes, 37):
        neighbours = graph.edge_index[1][graph.edge_index[0] == v]
        sims = F.cosine_similarity(h[v][None, :], h[neighbours], dim=1)
        assert float(r[v]) == pytest.approx(float((1 + sims.sum()) / (len(neighbours) + 1)))
    # identical embeddings along every edge: every node fully reliable
    assert torch.allclose(node_reliability(torch.ones_like(h), graph.edge_index),
                          torch.ones(graph.num_nodes, dtype=torch.float64))


@require("Cora")
def test_class_reliability_sums_the_training_nodes_of_each_class(one_round):
    ctx = one_round.contexts[2]
    data, graph = ctx.data, ctx.data.graph
    ckr = class_reliability(data, 7, 5)
    h = torch.cat([graph.x.double(), landing_probabilities(graph.edge_index,
                                                           graph.num_nodes, 5)], dim=1)
    r = node_reliability(h, graph.edge_index)
    train = data.index["train"]
    for c in range(7):
        rows = train[data.y[train] == c]
        assert float(ckr[c]) == pytest.approx(float(r[rows].sum()), rel=1e-6)
        if len(rows) == 0:
            assert float(ckr[c]) == 0.0
    # what the client sent is this vector
    assert torch.equal(ctx.cache["fedtad_reliability"], ckr)


def test_reliability_normalises_over_clients_or_over_classes():
    ckr = torch.tensor([[2.0, 0.0, 1.0], [6.0, 0.0, 3.0]], dtype=torch.float64)
    over_clients = normalised_reliability(ckr, "clients")
    assert torch.allclose(over_clients, torch.tensor([[0.25, 0.0, 0.25], [0.75, 0.0, 0.75]],
                                                     dtype=torch.float64))
    over_classes = normalised_reliability(ckr, "classes")
    assert torch.allclose(over_classes.sum(dim=1), torch.ones(2, dtype=torch.float64))
    assert torch.allclose(over_classes[0], torch.tensor([2 / 3, 0.0, 1 / 3],
                                                        dtype=torch.float64))


def test_pseudo_graph_is_balanced_symmetric_and_self_looped():
    labels = pseudo_labels(23, 7, torch.device("cpu"))
    assert torch.bincount(labels).tolist() == [3, 3, 3, 3, 3, 3, 5]
    assert torch.equal(labels, labels.sort().values)
    x = torch.randn(23, 10, generator=torch.Generator().manual_seed(1))
    edges = knn_edges(x, 5)
    pairs = set(map(tuple, edges.T.tolist()))
    assert pairs == {(t, s) for s, t in pairs}  # symmetric
    assert all((v, v) in pairs for v in range(23))
    unit = F.normalize(x, dim=1)
    nearest = (unit @ unit.T).topk(5, dim=1).indices
    assert all((v, int(u)) in pairs for v in range(23) for u in nearest[v])
    assert len(pairs) <= 23 * 2 * 5


@require("Cora")
def test_without_distillation_epochs_fedtad_is_fedavg():
    _, fedtad = evaluated_after(["algorithm=fedtad", "fedtad.glb_epochs=0", *CORA])
    _, fedavg = evaluated_after(["algorithm=fedavg", *CORA])
    assert fedtad == fedavg


@contextmanager
def options_of(server, **changes):
    """``server`` with these options for the block, its own after it."""
    kept = server.options
    server.options = kept.model_copy(update=changes)
    try:
        yield
    finally:
        server.options = kept


def _distilled(server, teachers, omega):
    """The global model after ``server`` distils ``teachers`` weighted by ``omega`` under seed
    3, the server's state left as it was."""
    saved = server.state_dict()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        server.distill(teachers, omega)
    params = server.params
    server.load_state_dict(saved)
    return params


@require("Cora")
def test_a_client_of_zero_reliability_teaches_nothing(one_round):
    """With the diversity term (counted once per teacher) off, a teacher whose every ω is 0
    changes nothing; the same teacher given weight changes the outcome."""
    server = one_round.server
    teachers = [{k: v + 0.01 * (i + 1) for k, v in server.params.items()} for i in range(2)]
    omega = torch.tensor([[0.6] * 7, [0.0] * 7])
    with options_of(server, lam2=0.0):
        both = _distilled(server, teachers, omega)
        alone = _distilled(server, teachers[:1], omega[:1])
        other = _distilled(server, teachers[1:], torch.full((1, 7), 0.6))
    assert all(torch.allclose(both[k], alone[k], rtol=1e-5, atol=1e-7) for k in both)
    assert any(not torch.allclose(both[k], other[k]) for k in both)


@require("Cora")
def test_student_steps_bring_the_global_model_closer_to_the_teachers(one_round):
    """Generator frozen (it_g = 0): 20 student steps on the epoch's pseudo graph shrink the
    reliability-weighted L1 gap to a teacher on that graph."""
    server = one_round.server
    o = server.options
    labels = pseudo_labels(o.num_gen, 7, torch.device("cpu"))
    run = Distiller(server.network, server.generator_net)
    teacher = {k: v + 0.05 * torch.randn(v.shape, generator=torch.Generator().manual_seed(5))
               for k, v in server.params.items()}
    omega = torch.ones(1, 7)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)  # the distillation's first noise draw
        z = torch.randn(o.num_gen, o.noise_dim)
    with torch.no_grad():
        graph = run.graph(server.generator, z, labels, o.topk)
        taught = [run.logits(teacher, graph, training=False)]

    def gap(params):
        with torch.no_grad():
            return float(run.disagreement(run.logits(params, graph, training=False), taught,
                                          omega, labels))

    with options_of(server, it_g=0, it_d=20, glb_epochs=1, lr_d=1e-2):
        after = _distilled(server, [teacher], omega)
    assert gap(after) < 0.8 * gap(server.params)


def test_graph_level_is_refused():
    result = CliRunner().invoke(app, ["run", "algorithm=fedtad", "dataset=MUTAG"])
    assert "fedtad" in error_line(result)
