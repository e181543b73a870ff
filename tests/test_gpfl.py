"""GPFL: the client network's equations on hand-made cases, and short real runs on PROTEINS."""

from __future__ import annotations

import pytest
import torch

from graphfed.algorithms.gpfl.gae import learn_scores
from graphfed.algorithms.gpfl.network import (
    discretize,
    inter_client_edges,
    normalize_network,
    property_similarity,
    select_properties,
)
from graphfed.algorithms.gpfl.options import EMBEDDING, PROPERTY_VECTOR, UPDATE, GPFLOptions
from graphfed.algorithms.gpfl.random_graphs import random_graph_batch
from graphfed.algorithms.gpfl.server import GPFLServer
from graphfed.config import load_config
from graphfed.data.properties import PROPERTIES
from graphfed.experiment import build_federation
from graphfed.mechanisms.client_network import cosine_similarities, mix
from graphfed.messages import Message
from graphfed.protocol import Setup
from tests.conftest import require
from tests.test_bad_input import error_line, invoke

PROTOCOL = ["dataset=PROTEINS", "algorithm=gpfl", "model=gin", "model.layers=3",
            "partition=gpfl_dirichlet", "num_clients=4", "batch_size=128",
            "optimizer.lr=0.001", "optimizer.persistent=true", "device=cpu"]
ROUNDS = 2


def _federation(*extra: str):
    return build_federation(load_config(None, [*PROTOCOL, *extra]), 0)


def _run(fed, rounds: int = ROUNDS) -> list[dict]:
    lines = [fed.setup()]
    for rnd in range(1, rounds + 1):
        lines.append(fed.fit_round(rnd))
    lines.append(fed.evaluate(rounds))
    return lines


# ------------------------------------------------------------------ random graphs

def test_default_random_batch_is_one_seed_0_graph_repeated():
    graphs = random_graph_batch(20, 3, distinct=False)
    assert len(graphs) == 20
    first = graphs[0]
    assert all(torch.equal(g.edge_index, first.edge_index) and torch.equal(g.x, first.x)
               for g in graphs)
    assert first.edge_index.shape[1] == 2 * 47  # both directions of 47 edges
    degree = torch.bincount(first.edge_index[0], minlength=30)
    assert int(degree.max()) == 8
    full = random_graph_batch(1, 9, distinct=False, degree="full")[0]
    assert torch.equal(full.x.argmax(1), degree)  # d_x = 9 clips nothing
    lower_end = torch.bincount(first.edge_index[0, :47], minlength=30)
    assert torch.equal(first.x.argmax(1), lower_end.clamp_max(2))  # the code's count, clipped
    assert first.x.shape == (30, 3) and torch.equal(first.x.sum(1), torch.ones(30))


def test_distinct_random_batch_has_twenty_different_graphs():
    graphs = random_graph_batch(20, 3, distinct=True)
    edge_sets = {tuple(map(tuple, g.edge_index.t().tolist())) for g in graphs}
    assert len(edge_sets) == 20


# ------------------------------------------------------------------ similarities and selector

def test_property_similarity_is_symmetric_in_unit_interval():
    properties = torch.randn(7, 6, generator=torch.Generator().manual_seed(0)).double()
    for standardize in (False, True):
        sim = property_similarity(properties, standardize)
        assert torch.allclose(sim, sim.t())
        assert float(sim.min()) >= 0.0 and float(sim.max()) <= 1.0 + 1e-12


def test_cosine_similarities_of_rows():
    v = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 3.0], [0.0, 0.0]], dtype=torch.float64)
    sim = cosine_similarities(v)
    assert sim[0, 1] == pytest.approx(1.0) and sim[0, 2] == 0.0 and sim[3].abs().sum() == 0


def _two_groups() -> torch.Tensor:
    """Clients {0, 1} and {2, 3}: a block network."""
    group = torch.tensor([0, 0, 1, 1])
    return (group[:, None] == group[None, :]).double()


def test_selector_drops_the_noisy_properties_first():
    signal = torch.tensor([1.0, 1.1, -1.0, -0.9], dtype=torch.float64)
    properties = torch.stack([signal, 0.5 * signal + 0.01,  # both separate the groups
                              torch.tensor([5.0, -5.0, 5.0, -5.0]).double(),  # large noise
                              torch.tensor([0.3, -0.3, -0.3, 0.3]).double()], dim=1)  # noise
    assert select_properties(properties, _two_groups()) == [0, 1]


def test_selector_keeps_every_property_when_no_removal_helps():
    properties = torch.randn(6, 6, generator=torch.Generator().manual_seed(1)).double()
    assert select_properties(properties, property_similarity(properties)) == list(range(6))


@pytest.mark.parametrize("seed", range(5))
def test_selector_never_goes_below_two_properties(seed):
    g = torch.Generator().manual_seed(seed)
    properties = torch.randn(5, 6, generator=g).double()
    target = torch.zeros(5, 5, dtype=torch.float64)  # nothing fits: every removal may help
    kept = select_properties(properties, target)
    assert 2 <= len(kept) <= 6 and kept == sorted(kept)


# ------------------------------------------------------------------ GAE and the network

def test_gae_loss_decreases_over_its_epochs():
    g = torch.Generator().manual_seed(0)
    features = torch.nn.functional.normalize(torch.randn(6, 100, generator=g), dim=1)
    network = normalize_network(torch.rand(6, 6, generator=g).double(), "row")
    torch.manual_seed(0)
    learned = learn_scores(features.double(), network, 128, 100, 1e-3, 5e-4, 1.0)
    assert len(learned.losses) == 100 and learned.scores.shape == (6, 6)
    assert learned.losses[-1] < 0.5 * learned.losses[0]


@pytest.mark.parametrize("mode", ["thresh", "ratio", "none"])
def test_network_rows_sum_to_one(mode):
    logits = torch.randn(8, 8, generator=torch.Generator().manual_seed(2)).double() * 5
    network = discretize(logits, mode, threshold=0.1, keep_ratio=0.1)
    assert torch.allclose(network.sum(1), torch.ones(8, dtype=torch.float64))
    if mode != "none":
        kept = network > 0
        assert torch.allclose(network[kept], (1 / kept.sum(1, keepdim=True).double())
                              .expand_as(network)[kept])


def test_discrete_threshold_is_a_share_of_the_uniform_weight():
    logits = torch.log(torch.tensor([[0.5, 0.49, 0.01], [0.2, 0.2, 0.6], [1.0, 1.0, 1.0]],
                                    dtype=torch.float64))
    # h = 0.1 / 3: row 0 drops its 0.01, the others keep every entry
    assert (discretize(logits, "thresh", 0.1, 0.1) > 0).tolist() == [
        [True, True, False], [True, True, True], [True, True, True]]
    assert inter_client_edges(discretize(logits, "thresh", 0.1, 0.1)) == 2.5


def test_sym_normalisation_and_empty_rows():
    a = torch.tensor([[1.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    assert normalize_network(a, "row").tolist() == [[0.5, 0.5], [0.0, 0.0]]
    sym = normalize_network(torch.tensor([[1.0, 3.0], [3.0, 1.0]], dtype=torch.float64), "sym")
    assert torch.allclose(sym, torch.tensor([[0.25, 0.75], [0.75, 0.25]], dtype=torch.float64))


# ------------------------------------------------------------------ aggregation (Eqs. 2, 4)

def _updates(k: int = 4) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(3)
    return [{"w": torch.randn(3, 2, generator=g), "b": torch.randn(2, generator=g)}
            for _ in range(k)]


def _weights(network: torch.Tensor, g: float) -> torch.Tensor:
    return (1 - g) * torch.eye(len(network), dtype=torch.float64) + g * network


def test_identity_network_or_no_network_weight_keeps_each_update():
    updates = _updates()
    learned = normalize_network(torch.rand(4, 4, dtype=torch.float64), "row")
    for weights in (_weights(learned, 0.0), _weights(torch.eye(4, dtype=torch.float64), 0.95)):
        for step, own in zip(mix(updates, weights), updates, strict=True):
            assert all(torch.allclose(step[k], own[k], atol=1e-7) for k in own)


def test_uniform_network_with_full_weight_gives_the_mean_update():
    updates = _updates()
    steps = mix(updates, _weights(torch.full((4, 4), 0.25, dtype=torch.float64), 1.0))
    for step in steps:
        for k in updates[0]:
            assert torch.allclose(step[k], torch.stack([u[k] for u in updates]).mean(0))


def _tiny_server(**options) -> GPFLServer:
    initial = {"w": torch.zeros(200), "b": torch.zeros(2)}
    setup = Setup(level="graph", num_clients=4, num_classes=2, initial_params=initial,
                  options=GPFLOptions(random_graphs=3, gae_epochs=5, **options))
    server = GPFLServer(setup)
    g = torch.Generator().manual_seed(4)
    server.aggregate_setup({c: Message({PROPERTY_VECTOR: torch.rand(6, generator=g)})
                            for c in range(4)})
    return server


def _replies(server: GPFLServer, clients, seed: int) -> dict[int, Message]:
    """Random updates shaped like the server's models and log-softmax embeddings."""
    g = torch.Generator().manual_seed(seed)
    r, c = server.options.random_graphs, server.setup.num_classes
    return {client: Message(
        {**{UPDATE + k: torch.randn(v.shape, generator=g)
            for k, v in server.setup.initial_params.items()},
         EMBEDDING: torch.log_softmax(torch.randn(r, c, generator=g), 1).reshape(-1)},
        {"num_samples": 10}) for client in clients}


def test_server_aggregates_along_its_network_and_remembers_it():
    server = _tiny_server(network_weight=1.0)
    replies = _replies(server, range(4), seed=5)
    server.aggregate_fit(1, replies)
    metrics = server.round_metrics()
    network = torch.tensor(metrics["network"], dtype=torch.float64)
    assert torch.allclose(network.sum(1), torch.ones(4, dtype=torch.float64), atol=1e-3)
    assert 2 <= len(metrics["properties"]) <= len(PROPERTIES)
    assert metrics["aggregation_speedup"] == pytest.approx(16 / (2 * metrics["edges"] + 4))
    assert metrics["gae_loss"][1] < metrics["gae_loss"][0]
    for c in range(4):  # g = 1: theta_i = 0 + sum_j N_ij dtheta_j
        mixed = sum(network[c, j] * replies[j].tensors[UPDATE + "w"].double() for j in range(4))
        assert torch.allclose(server.models[c]["w"].double(), mixed, atol=1e-3)
    assert torch.allclose(server.network.sum(1), torch.ones(4, dtype=torch.float64))


def test_a_dropped_client_keeps_its_model_and_the_rest_learn_among_themselves():
    server = _tiny_server()
    server.aggregate_fit(1, _replies(server, range(4), seed=6))
    before = [dict(m) for m in server.models]
    remembered = server.network.clone()
    server.aggregate_fit(2, _replies(server, [0, 1, 3], seed=7))
    assert all(torch.equal(server.models[2][k], before[2][k]) for k in before[2])
    assert not torch.equal(server.models[0]["w"], before[0]["w"])
    assert len(server.round_metrics()["network"]) == 3
    assert torch.equal(server.network[2], remembered[2])  # the absent row stays


def test_random_initial_network_needs_no_setup_exchange():
    setup = Setup(level="graph", num_clients=3, num_classes=2,
                  initial_params={"w": torch.zeros(4)},
                  options=GPFLOptions(initial_graph="random", learn=False, update=False))
    server = GPFLServer(setup)
    assert server.configure_setup([0, 1, 2]) == {}
    server.aggregate_fit(1, _replies(server, range(3), seed=1))
    first = server.network.clone()
    server.aggregate_fit(2, _replies(server, range(3), seed=2))
    assert torch.allclose(server.network, first)  # update=false: A_0 every round
    assert "gae_loss" not in server.round_metrics()


# ------------------------------------------------------------------ real runs on PROTEINS

@require("PROTEINS")
def test_uploads_are_counted_and_the_network_is_recorded():
    fed = _federation()
    lines = _run(fed)
    params = fed.runtime.server.setup.initial_params
    p_bytes = sum(v.numel() * v.element_size() for v in params.values())
    k, r, c = 4, 20, 2
    assert lines[0]["round"] == 0 and lines[0]["bytes_up"] == k * 6 * 4  # property vectors
    for line in lines[1:3]:
        assert line["bytes_up"] == k * (p_bytes + r * c * 4 + 2 * 8)  # update, embedding
        assert line["bytes_down"] == k * p_bytes  # each client's own model
        network = torch.tensor(line["server"]["network"], dtype=torch.float64)
        assert network.shape == (k, k)
        assert torch.allclose(network.sum(1), torch.ones(k, dtype=torch.float64), atol=1e-3)
    assert len(lines[-1]["clients"]) == k


@require("PROTEINS")
def test_functional_embedding_is_the_model_on_one_repeated_graph():
    fed = _federation()
    client, ctx = fed.runtime.client, fed.runtime.contexts[0]
    embedding = client.functional_embedding(fed.runtime.server.setup.initial_params, ctx)
    rows = embedding.view(20, 2)
    assert torch.allclose(rows.exp().sum(1), torch.ones(20))
    assert torch.equal(rows, rows[:1].expand(20, 2))


@require("PROTEINS")
def test_no_network_weight_equals_self_train():
    gpfl = _run(_federation("gpfl.network_weight=0"))[-1]["clients"]
    local = _run(_federation("algorithm=local"))[-1]["clients"]
    for mine, theirs in zip(gpfl, local, strict=True):
        assert mine["test_acc"] == theirs["test_acc"]
        assert mine["test_loss"] == pytest.approx(theirs["test_loss"], rel=1e-4)


@require("PROTEINS")
def test_partial_participation_is_refused_with_one_line():
    result = invoke("run", "configs/gpfl-proteins.yaml", "client_fraction=0.5")
    assert "needs client_fraction=1, got 0.5" in error_line(result)
