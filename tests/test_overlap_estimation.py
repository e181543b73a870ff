"""FairGFL's overlap estimation (node matching, scaling, link overlap, accumulation), its overall
ratio (Eq. 24), fair weights (Eq. 25, Theorem D.1) and the max-loss step (Eq. 27)."""

from __future__ import annotations

import math

import pytest
import torch

from graphfed.errors import GraphfedError
from graphfed.mechanisms.overlap import (
    FAIR_WEIGHTINGS,
    accumulate_overlaps,
    calibrate_threshold,
    empty_overlap_state,
    fair_weights,
    greedy_matching,
    match_recall,
    max_loss_step,
    node_matches,
    overall_overlap,
    round_overlaps,
    sample_link_overlap,
    scaled_link_overlap,
    scaled_node_overlap,
)
from graphfed.mechanisms.privacy import privatise_features

ENC_DIM = 16


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


class World:
    """A global pool of 400 nodes (encodings in [0, 1]^16, a random graph); client i holds
    nodes 0..199 and client j nodes 140..239, so they share 60: r_ij = 0.3, r_ji = 0.6."""

    def __init__(self, seed: int = 0):
        generator = _gen(seed)
        self.encodings = torch.rand(400, ENC_DIM, generator=generator)
        upper = torch.triu(torch.rand(400, 400, generator=generator) < 0.05, 1)
        self.adjacency = upper | upper.T
        self.nodes_i, self.nodes_j = torch.arange(0, 200), torch.arange(140, 240)

    def links(self, nodes: torch.Tensor) -> torch.Tensor:
        return self.adjacency[nodes][:, nodes]

    def true_link_overlap(self, nodes: torch.Tensor) -> float:
        """l = |E_i ∩ E_j| / |E of ``nodes``|, from the global graph."""
        shared = torch.arange(140, 200)
        return (self.links(shared).sum() / self.links(nodes).sum()).item()


def test_matching_identical_encodings_recovers_the_true_node_overlap():
    world = World()
    s_i, s_j = world.encodings[world.nodes_i], world.encodings[world.nodes_j]
    assert node_matches(s_i, s_j, 1e-6).double().mean().item() == pytest.approx(0.3)
    assert node_matches(s_j, s_i, 1e-6).double().mean().item() == pytest.approx(0.6)
    partner = greedy_matching(s_i, s_j, 1e-6)
    assert torch.equal(partner[140:], torch.arange(60))
    assert (partner[:140] == -1).all()


def test_full_samples_recover_the_true_link_overlap_under_either_scaling():
    world = World()
    s_i, s_j = world.encodings[world.nodes_i], world.encodings[world.nodes_j]
    partner = greedy_matching(s_i, s_j, 1e-6)
    ratio = sample_link_overlap(world.links(world.nodes_i), world.links(world.nodes_j), partner)
    assert ratio == pytest.approx(world.true_link_overlap(world.nodes_i))
    assert 0 < ratio < 1
    for scaling in ("linear", "quadratic"):  # b = n: nothing to scale
        assert scaled_link_overlap(ratio, 0.3, 100, 100, scaling) == pytest.approx(ratio)


def test_scaled_sample_ratios_are_unbiased_for_the_whole_subgraphs():
    """b_i = 100 of n_i = 200 and b_j = 50 of n_j = 100, 400 draws. E[r_hat_ij] = r_ij b_j/n_j
    (Lemma C.1); one R_hat has sd ~ 0.12, the mean of 400 ~ 0.006: tolerance 4 sd. The clip at 1
    acts with probability < 1e-3 per draw here. Unscaled ratios miss by 0.15 and 0.3."""
    world = World()
    generator = _gen(1)
    estimates = {"ij": [], "ji": []}
    raw = {"ij": [], "ji": []}
    for _ in range(400):
        sample_i = world.nodes_i[torch.randperm(200, generator=generator)[:100]]
        sample_j = world.nodes_j[torch.randperm(100, generator=generator)[:50]]
        s_i, s_j = world.encodings[sample_i], world.encodings[sample_j]
        for key, (a, b, size_b) in {"ij": (s_i, s_j, 100), "ji": (s_j, s_i, 200)}.items():
            ratio = node_matches(a, b, 1e-6).double().mean().item()
            raw[key].append(ratio)
            estimates[key].append(scaled_node_overlap(ratio, size_b, len(b)))
    for key, truth in (("ij", 0.3), ("ji", 0.6)):
        assert abs(sum(estimates[key]) / 400 - truth) <= 0.024
        assert abs(sum(raw[key]) / 400 - truth) > 0.1


def _grr(generator: torch.Generator):
    return lambda e: privatise_features(e, 8.0, generator, "grr_quantized")


def test_calibrated_tau_lets_95_percent_of_true_matches_through():
    """tau from 1,000 public nodes; on 2,000 fresh double privatisations of other nodes the
    share under tau is 0.95 within 4 sd (sd = sqrt(0.95 x 0.05 / 2,000) ~ 0.005) plus the
    quantile's own estimation error (~0.007 at 1,000 nodes)."""
    generator = _gen(2)
    public = torch.rand(1000, ENC_DIM, generator=generator)
    tau = calibrate_threshold(public, _grr(generator))
    fresh = torch.rand(2000, ENC_DIM, generator=generator)
    privatise = _grr(generator)
    distance = (privatise(fresh) - privatise(fresh)).norm(dim=1)
    assert abs((distance < tau).double().mean().item() - 0.95) <= 0.035
    assert calibrate_threshold(public, _grr(generator), quantile=0.5) < tau


def test_privatised_samples_with_a_calibrated_tau_recover_the_overlap():
    """Each client privatises its own nodes (grr_quantized, eps_v = 8 per element): shared nodes
    differ between the two releases. About 5 % of true matches fall outside tau by design, and
    distinct random nodes in [0, 1]^16 lie far apart, so r_hat is within 0.05 of the truth."""
    world = World()
    generator = _gen(3)
    tau = calibrate_threshold(torch.rand(500, ENC_DIM, generator=generator), _grr(generator))
    s_i = _grr(generator)(world.encodings[world.nodes_i])
    s_j = _grr(generator)(world.encodings[world.nodes_j])
    assert abs(node_matches(s_i, s_j, tau).double().mean().item() - 0.3) <= 0.05
    assert abs(node_matches(s_j, s_i, tau).double().mean().item() - 0.6) <= 0.05
    assert node_matches(s_i, s_j, tau)[:140].sum() == 0  # no false match among the rest


def test_a_strict_tau_halves_the_matches_and_its_recall_restores_the_ratio():
    """tau at the median keeps about half of the true matches (its recall, measured on public
    nodes, ~0.5); dividing the match ratio by it recovers r_ij = 0.3 and r_ji = 0.6 within
    about 2.5 sd of the 60 shared nodes' binomial draw (sd 0.04 and 0.08), and the link ratio,
    whose two endpoints must both match, is divided by its square."""
    world = World()
    generator = _gen(3)
    public = torch.rand(2000, ENC_DIM, generator=generator)
    tau = calibrate_threshold(public, _grr(generator), quantile=0.5)
    recall = match_recall(public, _grr(generator), tau)
    assert abs(recall - 0.5) <= 0.05
    nodes = [world.nodes_i, world.nodes_j]
    samples = [_grr(generator)(world.encodings[n]) for n in nodes]
    links = [world.links(n) for n in nodes]
    raw, raw_link = round_overlaps(samples, links, [200, 100], tau)
    node, link = round_overlaps(samples, links, [200, 100], tau, recall=recall)
    assert abs(raw[0, 1].item() - 0.15) <= 0.05 and abs(raw[1, 0].item() - 0.3) <= 0.08
    assert node[0, 1].item() == pytest.approx(raw[0, 1].item() / recall)
    assert abs(node[0, 1].item() - 0.3) <= 0.1 and abs(node[1, 0].item() - 0.6) <= 0.15
    assert link[1, 0].item() == pytest.approx(raw_link[1, 0].item() / recall**2)


def test_round_overlaps_fills_the_pairs_of_the_participants():
    """Three clients with full samples: i and j as above, k disjoint from both."""
    world = World()
    nodes_k = torch.arange(300, 400)
    nodes = [world.nodes_i, world.nodes_j, nodes_k]
    node, link = round_overlaps([world.encodings[n] for n in nodes],
                                [world.links(n) for n in nodes], [200, 100, 100], 1e-6)
    assert torch.allclose(node, torch.tensor([[0, 0.3, 0], [0.6, 0, 0], [0, 0, 0]],
                                             dtype=torch.float64))
    assert link[0, 1] == pytest.approx(world.true_link_overlap(world.nodes_i))
    assert link[1, 0] == pytest.approx(world.true_link_overlap(world.nodes_j))
    assert link[1, 0] > link[0, 1] > 0  # the same shared links are a larger share of j's
    assert (link[2] == 0).all() and (link[:, 2] == 0).all() and (link.diagonal() == 0).all()


def test_link_scaling_formulas_and_clipping():
    assert scaled_link_overlap(0.2, 0.5, 100, 50) == pytest.approx(0.4)
    assert scaled_link_overlap(0.2, 0.5, 100, 50, "quadratic") == pytest.approx(0.8)
    assert scaled_link_overlap(0.3, 0.5, 100, 50, "quadratic") == 1.0
    assert scaled_link_overlap(0.2, 0.0, 100, 50) == 0.0
    assert scaled_node_overlap(0.2, 100, 50) == pytest.approx(0.4)
    assert scaled_node_overlap(0.7, 100, 50) == 1.0
    with pytest.raises(GraphfedError, match="link scaling"):
        scaled_link_overlap(0.2, 0.5, 100, 50, "cubic")


def _sequential_greedy(distance: torch.Tensor, tau: float) -> list[int]:
    """The reference: walk all pairs under tau by (distance, row, column), take a pair when
    both its ends are free."""
    partner = [-1] * distance.shape[0]
    taken = set()
    pairs = sorted((distance[u, v].item(), u, v) for u in range(distance.shape[0])
                   for v in range(distance.shape[1]) if distance[u, v] < tau)
    for _, u, v in pairs:
        if partner[u] == -1 and v not in taken:
            partner[u] = v
            taken.add(v)
    return partner


@pytest.mark.parametrize("seed", range(6))
def test_vectorised_greedy_matching_equals_the_sequential_greedy(seed):
    """Coarse levels (many exact distance ties) and a tau that leaves some rows unmatched."""
    generator = _gen(seed)
    s_i = torch.randint(0, 3, (25, 2), generator=generator).float()
    s_j = torch.randint(0, 3, (18, 2), generator=generator).float()
    partner = greedy_matching(s_i, s_j, 1.5)
    assert partner.tolist() == _sequential_greedy(torch.cdist(s_i.double(), s_j.double()), 1.5)
    matched = partner[partner >= 0]
    assert len(matched.unique()) == len(matched)  # one-to-one


def test_ema_follows_its_formula_and_leaves_unobserved_pairs_alone():
    state = empty_overlap_state(4)
    first_node = torch.tensor([[0.0, 0.5], [0.2, 0.0]])
    state = accumulate_overlaps(state, [0, 2], first_node, first_node / 2, kappa=0.9)
    assert state["node"][0, 2] == 0.5 and state["node"][2, 0] == pytest.approx(0.2)  # initialised
    assert state["link"][0, 2] == 0.25
    second = torch.tensor([[0.0, 0.1, 0.3], [0.4, 0.0, 0.6], [0.7, 0.8, 0.0]])
    state = accumulate_overlaps(state, [2, 0, 3], second, second, kappa=0.9)
    assert state["node"][2, 0] == pytest.approx(0.9 * 0.2 + 0.1 * 0.1)
    assert state["node"][0, 2] == pytest.approx(0.9 * 0.5 + 0.1 * 0.4)
    assert state["link"][0, 2] == pytest.approx(0.9 * 0.25 + 0.1 * 0.4)
    assert state["node"][0, 3] == pytest.approx(0.6)  # first observation
    assert state["node"][3, 2] == pytest.approx(0.7)
    assert (state["node"][1] == 0).all() and (state["node"][:, 1] == 0).all()  # never observed
    assert state["node"].diagonal().eq(0).all()
    assert state["observed"][0, 2] == 2 and state["observed"][0, 3] == 1
    assert state["observed"][1].eq(0).all() and state["observed"].diagonal().eq(0).all()


def test_running_mean_averages_every_observation():
    state = empty_overlap_state(2)
    values = [0.9, 0.1, 0.5, 0.3]
    for value in values:
        observed = torch.tensor([[0.0, value], [value / 3, 0.0]])
        state = accumulate_overlaps(state, [0, 1], observed, observed, rule="running_mean")
    assert state["node"][0, 1] == pytest.approx(sum(values) / 4)
    assert state["link"][1, 0] == pytest.approx(sum(values) / 12)


def test_accumulation_leaves_its_input_state_unchanged_and_refuses_unknown_rules():
    state = empty_overlap_state(3)
    accumulate_overlaps(state, [0, 1], torch.ones(2, 2), torch.ones(2, 2))
    assert state["node"].eq(0).all() and state["observed"].eq(0).all()
    with pytest.raises(GraphfedError, match="accumulation"):
        accumulate_overlaps(state, [0, 1], torch.ones(2, 2), torch.ones(2, 2), rule="max")


def test_overall_overlap_is_eq_24():
    node = torch.tensor([[0.0, 0.3, 0.6], [0.1, 0.0, 0.2], [0.5, 0.4, 0.0]])
    link = torch.tensor([[0.0, 0.2, 0.0], [0.0, 0.0, 0.4], [0.1, 0.1, 0.0]])
    o = overall_overlap(node, link, gamma=0.25)
    expected = [0.25 * (0.3 + 0.6) / 2 + 0.75 * 0.2 / 2, 0.25 * 0.3 / 2 + 0.75 * 0.4 / 2,
                0.25 * 0.9 / 2 + 0.75 * 0.2 / 2]
    assert o.tolist() == pytest.approx(expected)
    assert overall_overlap(torch.full((3, 3), 7.0), torch.zeros(3, 3), 1.0).tolist() == [7.0] * 3


@pytest.mark.parametrize("rule", FAIR_WEIGHTINGS)
def test_fair_weights_sum_to_one_and_fall_as_overlap_grows(rule):
    overlap = torch.tensor([0.0, 0.05, 0.2, 0.4, 0.9])
    p = fair_weights(overlap, num_clients=40, rule=rule)
    assert p.sum().item() == pytest.approx(1.0)
    assert (p > 0).all() and (p[1:] < p[:-1]).all()
    uniform = fair_weights(torch.full((5,), 0.3), 40, rule)
    assert torch.allclose(uniform, torch.full((5,), 0.2, dtype=torch.float64))


def test_fair_weights_can_weigh_by_client_size():
    p = fair_weights(torch.zeros(3), 10, sizes=[10, 30, 60])
    assert p.tolist() == pytest.approx([0.1, 0.3, 0.6])


def _theorem_d1(rule: str) -> list[float]:
    """Ten clients in groups of 1, 2, 3 and 4 holding identical subgraphs, with the oracle
    o_i = (m_i - 1) / (N - 1): each subgraph's total weight."""
    groups = [1, 2, 3, 4]
    holders = [m for m in groups for _ in range(m)]
    overlap = torch.tensor([(m - 1) / 9 for m in holders])
    p = fair_weights(overlap, num_clients=10, rule=rule)
    owner = torch.tensor([g for g, m in enumerate(groups) for _ in range(m)])
    return [p[owner == g].sum().item() for g in range(len(groups))]


def test_theorem_d1_every_subgraph_gets_the_same_total_weight():
    assert _theorem_d1("inv_one_plus_sum") == pytest.approx([0.25] * 4)


@pytest.mark.parametrize("rule", ["inv_one_plus_mean", "one_minus"])
def test_the_alternative_weightings_do_not_equalise_subgraphs(rule):
    totals = _theorem_d1(rule)
    assert max(totals) - min(totals) > 0.1


def test_unknown_weighting_is_refused():
    with pytest.raises(GraphfedError, match="fair weighting"):
        fair_weights(torch.zeros(2), 2, rule="softmax")


def _params(*values: float) -> dict[str, torch.Tensor]:
    return {"w": torch.tensor(list(values)), "b": torch.tensor([sum(values)])}


def test_max_loss_step_with_zero_lambda_is_the_identity():
    aggregate = _params(1.0, 2.0)
    out = max_loss_step(aggregate, _params(0.0, 0.0), [_params(5.0, 5.0)], [3.0], lam=0.0)
    assert all(torch.equal(out[k], aggregate[k]) for k in aggregate)


def test_max_loss_step_moves_toward_the_client_with_the_largest_loss():
    current = _params(0.0, 0.0)
    aggregate = _params(1.0, 1.0)
    locals_ = [_params(2.0, 0.0), _params(-4.0, 4.0), _params(1.0, 1.0)]
    out = max_loss_step(aggregate, current, locals_, [0.7, 1.9, 0.2], lam=0.5)
    assert out["w"].tolist() == pytest.approx([1.0 + 0.5 * -4.0, 1.0 + 0.5 * 4.0])
    assert out["b"].tolist() == pytest.approx([2.0 + 0.5 * 0.0])

    def gap(model):
        return math.dist(model["w"].tolist(), locals_[1]["w"].tolist())

    assert gap(out) < gap(aggregate)
