"""FairGFL's LDP mechanisms: exact and sampled eps-LDP, randomised response on links, the
sparsity correction, permanent randomised response, bit packing and Table V's attack."""

from __future__ import annotations

import io
import math

import pytest
import torch

from graphfed.errors import GraphfedError
from graphfed.mechanisms.privacy import (
    FEATURE_MECHANISMS,
    corrected_density,
    empty_rr_cache,
    feature_probabilities,
    flip_probability,
    link_probabilities,
    majority_vote_accuracy,
    majority_vote_attack,
    pack_bits,
    privacy_spent,
    privatise_features,
    randomise_links,
    release_features,
    release_links,
    sparsify_links,
    unpack_bits,
)
from graphfed.messages import Message

DRAWS = 20_000
Z = 4.0  # one-sided normal quantile of every confidence bound below: tail 3.2e-5 per bound


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _max_ratio(table: torch.Tensor) -> float:
    """max over outputs and over ordered pairs of inputs (rows) of Pr[y | a] / Pr[y | b]."""
    return (table.unsqueeze(1) / table.unsqueeze(0)).max().item()


def _wilson(count: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Wilson score interval at Z for binomial counts: a lower and an upper bound on p."""
    p = count.double() / n
    centre = (p + Z**2 / (2 * n)) / (1 + Z**2 / n)
    half = Z * torch.sqrt(p * (1 - p) / n + Z**2 / (4 * n**2)) / (1 + Z**2 / n)
    return centre - half, centre + half


def _empirical_ratio(counts_a: torch.Tensor, counts_b: torch.Tensor, n: int) -> float:
    """A high-confidence lower bound on the largest likelihood ratio the samples show: for each
    output and both directions, (lower bound of Pr[y | a]) / (upper bound of Pr[y | b]). For a
    truly eps-LDP mechanism each bound fails with probability <= 3.2e-5, so over <= 10 outputs
    x 2 directions x 2 bounds this exceeds e^eps with probability below 1.3e-3."""
    low_a, high_a = _wilson(counts_a, n)
    low_b, high_b = _wilson(counts_b, n)
    return max((low_a / high_b).max().item(), (low_b / high_a).max().item())


GRID = torch.linspace(-0.25, 1.25, 61)  # the domain [0, 1] with its ends, and beyond (clipped)


@pytest.mark.parametrize("mechanism", FEATURE_MECHANISMS)
@pytest.mark.parametrize(("eps", "levels"), [(0.5, 10), (1.0, 10), (4.0, 10), (4.0, 2), (8.0, 5)])
def test_feature_tables_are_eps_ldp(mechanism, eps, levels):
    table = feature_probabilities(GRID, eps, mechanism, levels=levels)
    assert torch.allclose(table.sum(-1), torch.ones(len(GRID), dtype=torch.float64))
    ratio = _max_ratio(table)
    assert ratio <= math.exp(eps) + 1e-9
    # informative: the ends of the domain are told apart at least as well as e^(eps/2)
    assert ratio >= math.exp(eps / 2) - 1e-9


def test_grr_quantized_spends_its_whole_budget_between_neighbouring_levels():
    levels = torch.linspace(0, 1, 10)
    table = feature_probabilities(levels[:2], 1.0, "grr_quantized")
    assert table[0, 0] / table[1, 0] == pytest.approx(math.e)


def test_the_grr_rounding_is_unbiased_and_exact_on_levels():
    """Without randomised response (a huge eps) the output's mean is the clipped input."""
    table = feature_probabilities(GRID, 200.0, "grr_quantized")
    mean = (table * torch.linspace(0, 1, 10, dtype=torch.float64)).sum(-1)
    assert torch.allclose(mean, GRID.double().clamp(0, 1), atol=1e-9)


@pytest.mark.parametrize("mechanism", FEATURE_MECHANISMS)
def test_the_sampler_draws_from_the_exact_table(mechanism):
    inputs = torch.tensor([0.0, 0.03, 0.5, 0.77, 1.0])
    x = inputs.repeat_interleave(DRAWS).view(len(inputs), DRAWS)
    out = privatise_features(x, 2.0, _gen(1), mechanism)
    levels = torch.linspace(0, 1, 10)
    index = (out.unsqueeze(-1) - levels).abs().argmin(-1)
    assert torch.allclose(out, levels[index])  # every output is a level
    freq = torch.nn.functional.one_hot(index, 10).double().mean(1)
    table = feature_probabilities(inputs, 2.0, mechanism)
    assert ((freq - table).abs() <= Z * (table * (1 - table) / DRAWS).sqrt() + 1e-4).all()


def _worst_pair(table: torch.Tensor) -> tuple[int, int]:
    ratio = (table.unsqueeze(1) / table.unsqueeze(0)).amax(-1)
    a, b = divmod(int(ratio.argmax()), len(table))
    return a, b


@pytest.mark.parametrize("mechanism", FEATURE_MECHANISMS)
def test_sampled_features_respect_the_claimed_eps_and_the_check_catches_a_larger_one(mechanism):
    """The empirical check on the input pair the exact table says is the worst: it stays below
    e^eps when the mechanism runs with the claimed eps, and goes above it when the mechanism
    secretly runs with 3 eps."""
    eps = 1.0
    a, b = _worst_pair(feature_probabilities(GRID, eps, mechanism))
    levels = torch.linspace(0, 1, 10)

    def counts(x: float, run_eps: float, seed: int) -> torch.Tensor:
        out = privatise_features(torch.full((DRAWS,), x), run_eps, _gen(seed), mechanism)
        return torch.bincount((out.unsqueeze(-1) - levels).abs().argmin(-1), minlength=10)

    honest = _empirical_ratio(counts(GRID[a], eps, 2), counts(GRID[b], eps, 3), DRAWS)
    assert honest <= math.exp(eps)
    lying = _empirical_ratio(counts(GRID[a], 3 * eps, 2), counts(GRID[b], 3 * eps, 3), DRAWS)
    assert lying > math.exp(eps)


def test_link_table_is_eps_ldp_and_keeps_with_e_eps_over_one_plus_e_eps():
    for eps in (0.5, 1.0, 4.0):
        table = link_probabilities(eps)
        assert table[1, 1] == pytest.approx(math.exp(eps) / (1 + math.exp(eps)))
        assert _max_ratio(table) == pytest.approx(math.exp(eps))


def test_sampled_links_respect_the_claimed_eps_and_the_check_catches_a_larger_one():
    eps, size = 1.0, 201  # 20,100 upper-triangle pairs per matrix

    def counts(bit: bool, run_eps: float, seed: int) -> tuple[torch.Tensor, int]:
        adjacency = torch.full((size, size), bit)
        out = randomise_links(adjacency, run_eps, _gen(seed))
        upper = out[tuple(torch.triu_indices(size, size, 1))]
        return torch.bincount(upper.long(), minlength=2), len(upper)

    (zeros, n), (ones, _) = counts(False, eps, 4), counts(True, eps, 5)
    assert _empirical_ratio(zeros, ones, n) <= math.exp(eps)
    (zeros, n), (ones, _) = counts(False, 3 * eps, 4), counts(True, 3 * eps, 5)
    assert _empirical_ratio(zeros, ones, n) > math.exp(eps)


def test_randomised_links_are_symmetric_with_zero_diagonal_and_flip_at_rate_p():
    adjacency = torch.rand(120, 120, generator=_gen(6)) < 0.1
    adjacency = adjacency | adjacency.T
    out = randomise_links(adjacency, 1.0, _gen(7))
    assert out.dtype == torch.bool
    assert torch.equal(out, out.T)
    assert not out.diagonal().any()
    rows, cols = torch.triu_indices(120, 120, 1)
    flipped = (out[rows, cols] != adjacency[rows, cols]).double().mean().item()
    p, pairs = flip_probability(1.0), len(rows)
    assert abs(flipped - p) <= Z * math.sqrt(p * (1 - p) / pairs)
    assert torch.equal(out, randomise_links(adjacency, 1.0, _gen(7)))  # same state, same draw


def test_corrected_density_is_unbiased_in_simulation():
    """2,000 randomisations of a fixed 64-node adjacency of density rho = 0.3 at eps_e = 1. One
    estimate has sd sqrt(rho'(1 - rho') / 2016) / (1 - 2p) ~ 0.024, so the mean of 2,000 has
    sd ~ 5.3e-4; the tolerance is 4 sd. The clip to [0, rho'] never acts here (rho' ~ 0.41 is
    > 10 sd from both p and 1/2). The raw noisy density is biased by ~0.1 and fails it."""
    size, eps, runs = 64, 1.0, 2000
    rows, cols = torch.triu_indices(size, size, 1)
    pairs = len(rows)
    upper = torch.zeros(pairs, dtype=torch.bool)
    upper[torch.randperm(pairs, generator=_gen(8))[: round(0.3 * pairs)]] = True
    adjacency = torch.zeros(size, size, dtype=torch.bool)
    adjacency[rows, cols] = upper
    adjacency = adjacency | adjacency.T
    rho = upper.double().mean().item()
    generator = _gen(9)
    noisy = [randomise_links(adjacency, eps, generator)[rows, cols].double().mean().item()
             for _ in range(runs)]
    estimates = [corrected_density(d, eps) for d in noisy]
    p = flip_probability(eps)
    sd = math.sqrt(0.41 * 0.59 / pairs) / (1 - 2 * p) / math.sqrt(runs)
    assert abs(sum(estimates) / runs - rho) <= 4 * sd
    assert abs(sum(noisy) / runs - rho) > 0.05


def test_corrected_density_is_clipped_to_zero_and_to_the_noisy_density():
    p = flip_probability(1.0)
    assert corrected_density(p / 2, 1.0) == 0.0
    assert corrected_density(0.9, 1.0) == 0.9


def test_sparsify_keeps_the_estimated_count_of_closest_pairs():
    size, eps = 40, 1.0
    noisy = randomise_links(torch.zeros(size, size, dtype=torch.bool), eps, _gen(10))
    noisy |= randomise_links(torch.ones(size, size, dtype=torch.bool), eps, _gen(11)) & (
        torch.rand(size, size, generator=_gen(12)) < 0.2)
    noisy = torch.triu(noisy, 1) | torch.triu(noisy, 1).T
    encodings = torch.rand(size, 5, generator=_gen(13))
    out = sparsify_links(noisy, encodings, eps)
    rows, cols = torch.triu_indices(size, size, 1)
    ones = noisy[rows, cols]
    kept = out[rows, cols]
    assert kept.sum() == math.floor(corrected_density(ones.double().mean().item(), eps) * len(rows))
    assert 0 < kept.sum() < ones.sum()
    assert not (kept & ~ones).any()  # only ones are kept
    distance = (encodings[rows] - encodings[cols]).norm(dim=1)
    assert distance[kept].max() <= distance[ones & ~kept].min()
    assert torch.equal(out, out.T) and not out.diagonal().any()


@pytest.mark.parametrize("size", [64, 7, 1])
def test_bit_packing_round_trips_in_b_squared_over_8_bytes(size):
    adjacency = torch.rand(size, size, generator=_gen(14)) < 0.3
    packed = pack_bits(adjacency)
    assert packed.dtype == torch.uint8
    assert packed.numel() == math.ceil(size * size / 8)
    assert torch.equal(unpack_bits(packed, size), adjacency)


def test_packed_links_of_64_nodes_cost_512_bytes_in_a_message():
    adjacency = randomise_links(torch.zeros(64, 64, dtype=torch.bool), 1.0, _gen(15))
    assert Message(tensors={"links": pack_bits(adjacency)}).nbytes == 512


def test_unpacking_too_few_bytes_is_refused():
    with pytest.raises(GraphfedError, match="cannot hold"):
        unpack_bits(torch.zeros(511, dtype=torch.uint8), 64)


def _client(seed: int, size: int = 60, enc_dim: int = 8):
    """A client's encodings and (symmetric) adjacency over local node ids 0..size-1."""
    generator = _gen(seed)
    encodings = torch.rand(size, enc_dim, generator=generator)
    adjacency = torch.rand(size, size, generator=generator) < 0.2
    adjacency = torch.triu(adjacency, 1) | torch.triu(adjacency, 1).T
    return encodings, adjacency


def _release_round(cache, ids, encodings, adjacency, generator, permanent=True):
    features, cache = release_features(
        cache, ids, encodings[ids],
        lambda e: privatise_features(e, 1.0, generator), permanent)
    links, cache = release_links(cache, ids, adjacency[ids][:, ids], 1.0, generator, permanent)
    return features, links, cache


def test_permanent_response_resends_the_cached_encoding_and_link_bits():
    encodings, adjacency = _client(16)
    generator = _gen(17)
    first_ids = torch.tensor([3, 10, 25, 41, 7, 50])
    second_ids = torch.tensor([50, 12, 3, 41, 33])  # re-samples 50, 3, 41 in another order
    f1, l1, cache = _release_round(empty_rr_cache(8), first_ids, encodings, adjacency, generator)
    f2, l2, cache = _release_round(cache, second_ids, encodings, adjacency, generator)
    for a, b in ((5, 0), (0, 2), (3, 3)):  # positions of 50, 3, 41 in the two samples
        assert torch.equal(f1[a], f2[b])
    again = [5, 0, 3]
    assert torch.equal(l1[again][:, again], l2[[0, 2, 3]][:, [0, 2, 3]])
    assert torch.equal(l2, l2.T) and not l2.diagonal().any()
    assert sorted(cache["node_ids"].tolist()) == sorted({*first_ids.tolist(),
                                                         *second_ids.tolist()})
    assert cache["pair_keys"].numel() == 15 + 10 - 3  # 6 + 5 nodes' pairs, 3 pairs shared


def test_independent_caches_release_different_values_and_equal_seeds_equal_ones():
    encodings, adjacency = _client(18)
    ids = torch.arange(30)
    f1, l1, _ = _release_round(empty_rr_cache(8), ids, encodings, adjacency, _gen(19))
    f2, l2, _ = _release_round(empty_rr_cache(8), ids, encodings, adjacency, _gen(20))
    f3, l3, _ = _release_round(empty_rr_cache(8), ids, encodings, adjacency, _gen(19))
    assert not torch.equal(f1, f2) and not torch.equal(l1, l2)
    assert torch.equal(f1, f3) and torch.equal(l1, l3)


def test_without_permanent_response_a_requery_is_a_fresh_draw_and_the_budget_composes():
    encodings, adjacency = _client(21)
    ids = torch.arange(20)
    generator = _gen(22)
    cache = empty_rr_cache(8)
    releases = []
    for _ in range(3):
        features, links, cache = _release_round(cache, ids, encodings, adjacency, generator,
                                                permanent=False)
        releases.append((features, links))
    assert not torch.equal(releases[0][0], releases[1][0])
    assert not torch.equal(releases[0][1], releases[2][1])
    spent = privacy_spent(cache, eps_v=2.0, eps_e=1.0, permanent=False)
    assert spent == {"eps_element": 2.0, "eps_node": 3 * 8 * 2.0, "eps_link": 3 * 1.0}


def test_with_permanent_response_nothing_composes_over_rounds():
    encodings, adjacency = _client(23)
    generator = _gen(24)
    cache = empty_rr_cache(8)
    assert privacy_spent(cache, 2.0, 1.0) == {"eps_element": 2.0, "eps_node": 0.0,
                                              "eps_link": 0.0}
    for _ in range(5):
        ids = torch.randperm(60, generator=generator)[:20]
        _, _, cache = _release_round(cache, ids, encodings, adjacency, generator)
    assert int(cache["node_releases"].max()) > 1  # some node was re-sent
    assert privacy_spent(cache, 2.0, 1.0) == {"eps_element": 2.0, "eps_node": 8 * 2.0,
                                              "eps_link": 1.0}


def test_the_cache_survives_a_weights_only_checkpoint():
    encodings, adjacency = _client(25)
    ids = torch.tensor([4, 9, 1, 30])
    _, _, cache = _release_round(empty_rr_cache(8), ids, encodings, adjacency, _gen(26))
    buffer = io.BytesIO()
    torch.save(cache, buffer)
    buffer.seek(0)
    restored = torch.load(buffer, weights_only=True)
    later = torch.tensor([30, 4, 2])
    a = _release_round(cache, later, encodings, adjacency, _gen(27))
    b = _release_round(restored, later, encodings, adjacency, _gen(27))
    assert all(torch.equal(x, y) for x, y in zip(a[:2], b[:2], strict=True))


def test_a_sample_repeating_a_node_is_refused():
    encodings, _ = _client(28)
    with pytest.raises(GraphfedError, match="repeat a node"):
        release_features(empty_rr_cache(8), torch.tensor([1, 2, 1]), encodings[:3],
                         lambda e: privatise_features(e, 1.0, _gen(0)))


@pytest.mark.parametrize("bad", [{"eps": 0.0}, {"eps": -1.0}, {"eps": math.inf},
                                 {"levels": 1}, {"low": 1.0, "high": 1.0},
                                 {"mechanism": "laplace"}])
def test_bad_mechanism_parameters_get_one_clear_error(bad):
    kwargs = {"eps": 1.0, "mechanism": "exponential", "low": 0.0, "high": 1.0, "levels": 10}
    kwargs.update(bad)
    with pytest.raises(GraphfedError):
        feature_probabilities(torch.zeros(3), **kwargs)


PAPER_TABLE_V = {1: 0.727, 5: 0.875, 10: 0.934, 20: 0.986, 30: 0.996}
EXACT_TABLE_V = {1: 0.731, 5: 0.876, 10: 0.935, 20: 0.985, 30: 0.996}  # spec §7.1-3


@pytest.mark.parametrize("queries", sorted(PAPER_TABLE_V))
def test_table_v_majority_vote_matches_the_paper_at_eps_e_1(queries):
    exact = majority_vote_accuracy(1.0, queries)
    assert abs(exact - PAPER_TABLE_V[queries]) <= 0.005
    assert exact == pytest.approx(EXACT_TABLE_V[queries], abs=5e-4)
    sampled = majority_vote_attack(torch.ones(10_000, dtype=torch.bool), 1.0, queries, _gen(29))
    # 10,000 links: the sampled accuracy has sd sqrt(a (1 - a) / 10,000) <= 0.45 pp
    assert abs(sampled - exact) <= Z * math.sqrt(exact * (1 - exact) / 10_000)


def test_majority_vote_of_one_query_is_the_keep_probability():
    assert majority_vote_accuracy(2.0, 1) == pytest.approx(1 - flip_probability(2.0))
    assert majority_vote_accuracy(2.0, 2) == pytest.approx(1 - flip_probability(2.0))
