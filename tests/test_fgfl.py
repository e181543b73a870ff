"""FGFL and the gradient-reward mechanism it shares with CGSV, DW, EU and RFFL."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch_geometric.data import Data

from graphfed.algorithms.fgfl import FGFLOptions, FGFLServer
from graphfed.config import load_config
from graphfed.data.motifs import (
    BOND,
    RING,
    build_vocabulary,
    decode_keys,
    encode_keys,
    graph_motifs,
    mean_tfidf,
    ring_key,
)
from graphfed.experiment import build_federation, run_experiment
from graphfed.mechanisms.payoff import fgfl_payoff, gradient_shapley
from graphfed.mechanisms.sparse_rewards import (
    decode_sparse,
    densify,
    encode_sparse,
    reward_counts,
    sparsify,
    top_magnitude,
    value_weights,
)
from graphfed.messages import Message
from graphfed.protocol import Setup
from tests.conftest import interrupted_run, require

FGFL_PROTOCOL = ["dataset=PROTEINS", "algorithm=fgfl", "model=gin", "partition=gcfl_chunk",
                 "partition.global_test=0.1", "partition.split=[0.9,0.0,0.1]", "num_clients=10",
                 "batch_size=128", "optimizer.lr=0.001", "device=cpu"]


# ------------------------------------------------------------------ mechanism

def test_value_weights_sum_to_one_and_exclude_non_positive_values():
    w = value_weights(torch.tensor([0.5, -0.2, 0.0, 0.3]))
    assert float(w.sum()) == pytest.approx(1.0)
    assert w[1] == 0 and w[2] == 0
    assert float(w[0] / w[3]) == pytest.approx(0.5 / 0.3)


def test_value_weights_fall_back_to_uniform_when_no_value_is_positive():
    assert value_weights(torch.tensor([-1.0, 0.0])).tolist() == [0.5, 0.5]


def test_reward_counts_follow_eq4():
    values = torch.tensor([0.4, 0.2, -0.1, 0.0])
    counts = reward_counts(values, 1000, beta=1.0)
    expected = int(1000 * torch.tanh(torch.tensor(0.2, dtype=torch.float64))
                   / torch.tanh(torch.tensor(0.4, dtype=torch.float64)))
    assert counts.tolist() == [1000, expected, 0, 0]
    assert reward_counts(values, 1000, shape="linear").tolist() == [1000, 500, 0, 0]


@pytest.mark.parametrize("count", [0, 2, 40, 100])
def test_sparse_rewards_round_trip_in_the_cheaper_encoding(count):
    torch.manual_seed(0)
    v = torch.randn(100)
    index, value = sparsify(v, count)
    tensors = encode_sparse(index, value, 100)
    dense = decode_sparse(tensors, 100)
    expected = densify(index, value, 100)
    assert (dense is None) if count == 0 else torch.equal(dense, expected)
    size = sum(t.numel() * t.element_size() for t in tensors.values())
    assert size == min(8 * count, 13 + 4 * count)


def test_sparsify_keeps_exactly_the_largest_magnitudes_even_on_ties():
    v = torch.tensor([0.1, -3.0, 2.0, 2.0, 2.0, 0.0])
    index, value = sparsify(v, 3)
    assert index.dtype == torch.int32 and len(index) == 3
    assert 1 in index.tolist()
    dense = densify(index, value, 6)
    assert int((dense != 0).sum()) == 3 and float(dense[1]) == -3.0
    layer_index, _ = sparsify(torch.arange(1.0, 11.0), 5, "layer", [4, 6])
    assert layer_index.tolist() == [2, 3, 7, 8, 9]  # ceil(0.5*4)=2 of the first, 3 of the second


@given(st.lists(st.integers(-3, 3), min_size=1, max_size=40), st.data())
def test_top_magnitude_is_the_stable_ranking_by_magnitude(values, data):
    """Few distinct values, so ties at the threshold are the rule: the kept set is the first
    ``count`` of a stable sort by decreasing magnitude, returned in ascending order."""
    count = data.draw(st.integers(1, len(values)))
    vector = torch.tensor(values, dtype=torch.float32)
    ranked = sorted(range(len(values)), key=lambda i: -abs(values[i]))
    assert top_magnitude(vector, count).tolist() == sorted(ranked[:count])


# ------------------------------------------------------------------ server valuation

def _server(n=4, dim=20, **options):
    params = {"w": torch.zeros(dim)}
    setup = Setup(level="graph", num_clients=n, num_classes=2, initial_params=params,
                  options=FGFLOptions(use_prototypes=False, **options))
    return FGFLServer(setup)


def _round(server, rnd, updates):
    replies = {c: Message({"update": u.float()}, {"num_samples": 10})
               for c, u in enumerate(updates)}
    server.aggregate_fit(rnd, replies)
    return server.round_metrics()


def test_an_agent_sending_the_opposite_of_the_aggregate_ends_with_no_reward():
    torch.manual_seed(0)
    server = _server()
    direction = torch.randn(20)
    direction /= direction.norm()
    for rnd in range(1, 9):
        honest = [direction + 0.05 * torch.randn(20) for _ in range(3)]
        honest = [u / u.norm() for u in honest]
        metrics = _round(server, rnd, [*honest, -direction])
        assert metrics["alignment"][3] < -0.95
    assert metrics["values"][3] < 0
    assert metrics["reward_components"][3] == 0
    assert max(metrics["reward_components"]) == 20  # the top agent gets all D components
    assert decode_sparse(server.message_for(3).tensors, 20) is None
    top = max(range(4), key=lambda c: metrics["values"][c])
    assert int((decode_sparse(server.message_for(top).tensors, 20) != 0).sum()) == 20
    assert sum(metrics["weights"]) == pytest.approx(1.0)


def test_values_add_diversity_and_are_normalised():
    server = _server(n=2, dim=3)
    server.diversity = torch.tensor([1.0, 0.5], dtype=torch.float64)
    u = torch.tensor([1.0, 0.0, 0.0])
    metrics = _round(server, 1, [u, u])
    r0 = 0.5 + 0.05 * (1 + 1.0)
    r1 = 0.5 + 0.05 * (1 + 0.5)
    assert metrics["values"] == pytest.approx([r0 / (r0 + r1), r1 / (r0 + r1)])
    assert sum(metrics["payoff"]) == pytest.approx(1.0)


def test_payoffs_spend_the_budget_and_punish_negative_values():
    pay = fgfl_payoff([0.5, 0.3, 0.2], past_mean=[0.4, 0.4, 0.4], budget=2.0)
    assert sum(pay) == pytest.approx(2.0)
    assert pay[0] > pay[1] > pay[2]
    punished = fgfl_payoff([0.7, 0.5, -0.2], past_mean=None, budget=1.0)
    assert punished[2] < 0 and sum(punished) == pytest.approx(1.0)


def test_no_compensation_for_a_value_that_never_rises():
    # mu = max(r - mean of past r, 0) = 0 for a falling value: payoff is r itself (scaled)
    falling = fgfl_payoff([0.2, 0.8], past_mean=[0.3, 0.5], budget=1.0)
    rising_mu = 0.8 - 0.5
    assert falling == pytest.approx([0.2 / (0.2 + 0.8 + rising_mu),
                                     (0.8 + rising_mu) / (0.2 + 0.8 + rising_mu)])


def test_exact_gradient_shapley_agrees_in_sign_with_the_cosine_approximation():
    torch.manual_seed(1)
    base = torch.randn(50)
    updates = torch.stack([base + 0.3 * torch.randn(50) for _ in range(4)] + [-base])
    weights = torch.full((5,), 0.2, dtype=torch.float64)
    aggregate = (weights.view(-1, 1) * updates.double()).sum(0)
    shapley = gradient_shapley(updates, weights, aggregate)
    cosines = torch.nn.functional.cosine_similarity(updates.double(), aggregate.view(1, -1))
    assert [s > 0 for s in shapley] == [c > 0 for c in cosines.tolist()] == [True] * 4 + [False]
    assert sum(shapley) == pytest.approx(1.0)  # efficiency: v(N) = cos(u_N, u_N) = 1


# ------------------------------------------------------------------ motifs

def _labelled_graph(labels, edges):
    x = torch.nn.functional.one_hot(torch.tensor(labels), 5).float()
    e = torch.tensor(edges).t()
    return Data(x=x, edge_index=torch.cat([e, e.flip(0)], 1), num_nodes=len(labels))


def test_ring_keys_ignore_rotation_and_reflection():
    assert ring_key([3, 1, 2, 1]) == ring_key([1, 2, 1, 3]) == ring_key([1, 3, 1, 2])
    assert ring_key([0, 1, 2]) != ring_key([0, 1, 1])


def test_isomorphic_labelled_rings_in_different_orientations_get_equal_keys():
    # a labelled 4-ring with a pendant bond, node ids permuted and the ring walked backwards
    a = _labelled_graph([0, 1, 2, 3, 4], [(0, 1), (1, 2), (2, 3), (3, 0), (3, 4)])
    b = _labelled_graph([4, 3, 2, 1, 0], [(1, 0), (3, 2), (2, 1), (3, 4), (4, 1)])
    motifs_a, motifs_b = graph_motifs(a), graph_motifs(b)
    assert motifs_a == motifs_b
    assert motifs_a[(RING, 0, 1, 2, 3)] == 1 and motifs_a[(BOND, 3, 4)] == 1
    assert sum(motifs_a.values()) == 2  # ring edges are not also bonds


def test_rings_longer_than_four_are_bonds():
    pentagon = _labelled_graph([0, 0, 0, 0, 0], [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)])
    assert graph_motifs(pentagon) == {(BOND, 0, 0): 5}


def test_key_encoding_round_trips():
    keys = [(BOND, 0, 7), (RING, 1, 2, 3), (RING, 0, 0, 1, 1)]
    assert decode_keys(encode_keys(keys)) == keys
    assert encode_keys(keys).shape == (3, 6)


def test_uncapped_rings_as_the_paper_defines_them_are_rings_with_wider_keys():
    pentagon = _labelled_graph([0, 0, 0, 0, 1], [(0, 1), (1, 2), (2, 3), (3, 4), (4, 0)])
    motifs = graph_motifs(pentagon, max_ring=1000)
    assert motifs == {(RING, 0, 0, 0, 0, 1): 1}
    keys = [*motifs, (BOND, 0, 1)]
    assert encode_keys(keys).shape == (2, 7) and decode_keys(encode_keys(keys)) == keys


def test_tfidf_plus_one_in_the_idf_or_after_the_count_by_hand():
    # a motif seen 3 times in the 2 of 4 graphs that hold it: idf term log(5 / 3)
    idf = math.log(5 / 3)
    assert mean_tfidf(3, 4, 2, "in_idf") == pytest.approx(3 * (idf + 1) / 2)  # the code
    assert mean_tfidf(3, 4, 2, "after_count") == pytest.approx(3 * idf / 2 + 1)  # Eq. 16


def test_tfidf_placement_changes_which_motif_is_kept():
    # bond (0,0): twice in each of 3 graphs; bond (1,1): once in one graph
    path = _labelled_graph([0, 0, 0], [(0, 1), (1, 2)])
    both = _labelled_graph([0, 0, 0, 1, 1], [(0, 1), (1, 2), (3, 4)])
    graphs = [path, path, both]
    # code: 2 * (0 + 1) = 2 beats 1 * (log 2 + 1); paper: 2 * 0 + 1 = 1 loses to log 2 + 1
    assert build_vocabulary(graphs, 0.5, tfidf_one="in_idf").keys == [(BOND, 0, 0)]
    assert build_vocabulary(graphs, 0.5, tfidf_one="after_count").keys == [(BOND, 1, 1)]


@require("PROTEINS")
def test_vocabulary_is_deterministic_and_tfidf_filtered(proteins):
    graphs = proteins.graphs[:60]
    v1, v2 = build_vocabulary(graphs, 0.9), build_vocabulary(list(reversed(graphs)), 0.9)
    everything = build_vocabulary(graphs, 1.0)
    assert set(v1.keys) == set(v2.keys)
    assert len(v1.keys) == int(0.9 * len(everything.keys))
    assert v1.membership.shape == (60, len(v1.keys))
    assert bool((v1.counts >= 1).all())


# ------------------------------------------------------------------ end to end

@require("PROTEINS")
def test_fgfl_setup_exchange_and_sparse_reward_bytes():
    config = load_config(None, [*FGFL_PROTOCOL, "rounds=2"])
    fed = build_federation(config, 0)
    setup = fed.setup()
    assert setup["round"] == 0 and setup["bytes_up"] > 0
    server = fed.runtime.server
    assert float(server.diversity.min()) > 0 and float(server.diversity.max()) <= 1
    fed.fit_round(1)
    metrics = server.round_metrics()
    messages = server.configure_fit(2, list(range(10)))
    proto_bytes = [4 * server.codes[c].numel() * 64 for c in range(10)]
    dim = metrics["shared_dim"]
    for c, message in messages.items():
        n = metrics["reward_components"][c]
        # the cheaper of int32 indices + values and a D-bit mask + values
        assert message.nbytes == min(8 * n, (dim + 7) // 8 + 4 * n) + proto_bytes[c]
    assert metrics["reward_bytes"] == sum(m.nbytes for m in messages.values()) - sum(proto_bytes)
    assert metrics["reward_bytes_dense"] == 4 * 10 * metrics["shared_dim"]
    line = fed.fit_round(2)
    assert line["bytes_down"] == sum(m.nbytes for m in messages.values())


@require("PROTEINS")
def test_fgfl_run_resumes_exactly(tmp_path):
    from graphfed.experiment import resume_experiment

    config = load_config(None, [*FGFL_PROTOCOL, "rounds=4", "checkpoint_every=2", "name=f"])
    _, whole = run_experiment(config, tmp_path / "whole", progress=False)
    cut = interrupted_run(config, tmp_path / "cut", at_round=3)
    _, resumed = resume_experiment(cut, progress=False)
    assert resumed["final"] == whole["final"]
    final = whole["final"]  # sparse rewards save downlink against dense ones
    assert final["bytes_down"] < final["bytes_down_dense_equivalent"]


# ------------------------------------------------------------------ paper or code

def _federation(*overrides):
    fed = build_federation(load_config(None, [*FGFL_PROTOCOL, "rounds=2", *overrides]), 0)
    fed.setup()
    return fed


@require("PROTEINS")
def test_setup_prototypes_are_clipped_to_unit_norm_only_in_the_codes_setting():
    code = _federation().runtime.server.prototypes
    paper = _federation("fgfl.initial_proto_norm=none").runtime.server.prototypes
    assert float(code.norm(dim=1).max()) <= 1 + 1e-5
    assert float(paper.norm(dim=1).max()) > 1


@require("PROTEINS")
def test_tfidf_placement_changes_a_real_vocabulary(proteins):
    graphs = proteins.graphs[:90]
    code = build_vocabulary(graphs, 0.9, tfidf_one="in_idf")
    paper = build_vocabulary(graphs, 0.9, tfidf_one="after_count")
    assert len(code.keys) == len(paper.keys) and code.keys != paper.keys


@require("PROTEINS")
def test_the_papers_prototype_regulariser_trains_differently_from_the_codes():
    code, paper = _federation(), _federation("fgfl.proto_distance=l2", "fgfl.proto_reduce=sum",
                                             "fgfl.proto_scope=dataset")
    code.fit_round(1)
    paper.fit_round(1)
    assert any(not torch.allclose(v, paper.runtime.server.params[k])
               for k, v in code.runtime.server.params.items())


@require("PROTEINS")
@pytest.mark.parametrize("apply", ["reset_then_add", "add_to_local"])
def test_full_rewards_on_the_round_start_model_are_vanilla_fl(apply):
    """beta = inf (every agent gets the whole aggregate): with reset_then_add every agent's
    model is the global model, as the paper's vanilla-FL limit says; add_to_local keeps each
    agent's own step on top."""
    fed = _federation("fgfl.sparsify_reward=false", f"fgfl.reward_apply={apply}")
    runtime = fed.runtime
    for rnd in (1, 2):
        fed.fit_round(rnd)
    messages = runtime.server.configure_evaluate(2, list(range(10)))
    deployed = [runtime.client.current(messages[c], ctx) for c, ctx in enumerate(runtime.contexts)]
    same = [all(torch.allclose(p[k], v, atol=1e-6) for k, v in runtime.server.params.items())
            for p in deployed]
    assert all(same) == (apply == "reset_then_add")


# ------------------------------------------------------------------ node level (FairGFL's FGFL)

NODE_FGFL = ["dataset=Cora", "algorithm=fgfl", "partition=louvain", "num_clients=4", "rounds=2",
             "device=cpu", "fgfl.budget=2.0"]


@require("Cora")
def test_node_level_fgfl_values_by_alignment_alone_and_pays_sparsified_rewards():
    fed = build_federation(load_config(None, NODE_FGFL), 0)
    server = fed.runtime.server
    assert fed.setup() is None  # no motifs, so no vocabulary exchange
    values = [0.25] * 4
    for rnd in (1, 2):
        line = fed.fit_round(rnd)
        metrics = server.round_metrics()
        assert "diversity" not in metrics and "prototype_bytes" not in metrics
        # Eq. 10 with alpha2 = 0: r <- r + alpha1 phi, normalised to sum 1
        raised = [r + 0.05 * phi for r, phi in zip(values, metrics["alignment"], strict=True)]
        values = [r / sum(raised) for r in raised]
        assert metrics["values"] == pytest.approx(values, rel=1e-12)
        assert sum(metrics["payoff"]) == pytest.approx(2.0)  # the budget B
        dim = metrics["shared_dim"]
        expected = reward_counts(torch.tensor(values, dtype=torch.float64), dim, beta=1.0)
        assert metrics["reward_components"] == expected.tolist()
        assert max(metrics["reward_components"]) == dim
        assert min(metrics["reward_components"]) < dim  # sparsified, not the full aggregate
        messages = server.configure_fit(rnd + 1, list(range(4)))
        top = metrics["reward_components"].index(dim)
        aggregate = decode_sparse(messages[top].tensors, dim).abs()
        for c, message in messages.items():
            assert set(message.tensors) <= {"reward_index", "reward_value", "reward_mask"}
            kept = message.tensors["reward_value"]
            assert len(kept) == metrics["reward_components"][c]
            if len(kept) < dim:  # the largest magnitudes of the aggregate
                assert float(kept.abs().min()) >= float(aggregate.kthvalue(dim - len(kept)).values)
        assert line["bytes_up"] == 4 * (4 * dim + 8 * 2)  # the update and 2 scalars each
    assert fed.evaluate(2)["test_acc"] > 0.3


@require("Cora")
@pytest.mark.parametrize("option", ["use_diversity", "use_prototypes"])
def test_node_level_fgfl_refuses_motif_terms_in_one_line(option):
    from typer.testing import CliRunner

    from graphfed.cli import app
    from tests.conftest import error_line

    result = CliRunner().invoke(app, ["run", *NODE_FGFL, f"fgfl.{option}=true", "--quiet"])
    assert f"fgfl.{option}=true" in error_line(result)
    assert "graph-level" in error_line(result)
