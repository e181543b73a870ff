"""Local differential privacy for FairGFL's uploads (Zhou et al., TPDS 2025, Sec. V-A).

A client uploads a small sample of its nodes each round: their encodings, randomised element by
element by the feature mechanism M_v (Eq. 21), and the links among them, randomised by
randomised response M_e (Eq. 22) and then sparsified (Theorem V.3). Permanent randomised
response (App. F-A) makes each node and each link cost its budget once, however often it is
sampled again. Every random draw takes an explicit ``torch.Generator``: the same generator state
gives the same output.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch
from torch import Tensor

from graphfed.errors import GraphfedError

FeatureMechanism = Literal["exponential", "grr_quantized"]
FEATURE_MECHANISMS: tuple[str, ...] = ("exponential", "grr_quantized")

RRCache = dict[str, Tensor]
"""The permanent-response cache: tensors only, so ``torch.load(weights_only=True)`` reads it."""

_PAIR_SHIFT = 31  # an unordered pair (u < v) of local node ids is the key u << 31 | v


def _check_budget(eps: float) -> None:
    if not (eps > 0 and math.isfinite(eps)):
        raise GraphfedError(f"an LDP budget must be a positive finite number, got {eps}")


def quantile_levels(low: float = 0.0, high: float = 1.0, levels: int = 10) -> Tensor:
    """The L equidistant output levels y_k = low + k (high - low) / (L - 1) of M_v (Eq. 21)."""
    if levels < 2:
        raise GraphfedError(f"the feature mechanism needs at least 2 levels, got {levels}")
    if not low < high:
        raise GraphfedError(f"the feature domain needs low < high, got [{low}, {high}]")
    return torch.linspace(low, high, levels, dtype=torch.float64)


def _exponential_table(x: Tensor, eps: float, grid: Tensor) -> Tensor:
    """Pr[y_k | x] = exp(-eps |x - y_k| / (2 (high - low))) / Z(x): the score changes by at most
    eps / 2 between any two inputs, so numerator and normaliser each move by at most e^(eps/2)."""
    scale = 2.0 * float(grid[-1] - grid[0])
    scores = -eps * (x.unsqueeze(-1) - grid).abs() / scale
    return torch.softmax(scores, dim=-1)


def _rounding_table(x: Tensor, grid: Tensor) -> Tensor:
    """Unbiased stochastic rounding: x between y_k and y_(k+1) goes up with probability
    (x - y_k) / (y_(k+1) - y_k), so the expected level is x."""
    step = float(grid[1] - grid[0])
    position = (x - grid[0]) / step
    lower = position.floor().clamp(max=len(grid) - 2)
    up = position - lower
    table = torch.zeros(*x.shape, len(grid), dtype=torch.float64)
    table.scatter_(-1, lower.long().unsqueeze(-1), (1 - up).unsqueeze(-1))
    table.scatter_add_(-1, lower.long().unsqueeze(-1) + 1, up.unsqueeze(-1))
    return table


def _grr_keep(eps: float, levels: int) -> tuple[float, float]:
    """k-ary randomised response: keep with e^eps / (e^eps + L - 1), else each other level with
    1 / (e^eps + L - 1); the ratio of the two is e^eps."""
    keep = 1.0 / (1.0 + (levels - 1) * math.exp(-eps))
    return keep, (1.0 - keep) / (levels - 1)


def feature_probabilities(x: Tensor, eps: float, mechanism: FeatureMechanism = "exponential",
                          low: float = 0.0, high: float = 1.0, levels: int = 10) -> Tensor:
    """The exact output distribution of M_v: shape ``x.shape + (levels,)``, the probability of
    each level y_k for every element of ``x`` (clipped to [low, high]), in float64.

    RECONSTRUCTED (spec §3.2; the paper's Eq. 21 was lost): ``exponential`` (default) is the
    discretised exponential mechanism over the L levels; ``grr_quantized`` rounds x
    stochastically and unbiasedly to its two neighbouring levels, then applies L-ary randomised
    response. Both are eps-LDP per element (Theorem V.1) for any L. A third reading,
    ``duchi_multi`` (spec §3.2), is not implemented.
    """
    _check_budget(eps)
    grid = quantile_levels(low, high, levels)
    x = x.detach().to(torch.float64).clamp(low, high)
    if mechanism == "exponential":
        return _exponential_table(x, eps, grid)
    if mechanism == "grr_quantized":
        keep, other = _grr_keep(eps, levels)
        return other + (keep - other) * _rounding_table(x, grid)
    raise GraphfedError(f"unknown feature mechanism {mechanism!r}; choose one of "
                        f"{', '.join(FEATURE_MECHANISMS)}")


def privatise_features(x: Tensor, eps: float, generator: torch.Generator,
                       mechanism: FeatureMechanism = "exponential", low: float = 0.0,
                       high: float = 1.0, levels: int = 10) -> Tensor:
    """M_v (Eq. 21) applied independently to every element of ``x``: a float32 tensor of the
    same shape whose values are levels y_k. ``eps`` is the budget per element.

    ``exponential`` draws from its table; ``grr_quantized`` draws its two stages (stochastic
    rounding, then randomised response), so a test comparing samples with
    ``feature_probabilities`` checks one against the other.
    """
    grid = quantile_levels(low, high, levels)
    if mechanism == "grr_quantized":
        _check_budget(eps)
        rounding = _rounding_table(x.detach().to(torch.float64).clamp(low, high), grid)
        level = _draw(rounding.reshape(-1, levels), generator)
        keep, _ = _grr_keep(eps, levels)
        kept = torch.rand(level.shape, generator=generator, dtype=torch.float64) < keep
        other = torch.randint(0, levels - 1, level.shape, generator=generator)
        level = torch.where(kept, level, other + (other >= level).long())
    else:
        table = feature_probabilities(x, eps, mechanism, low, high, levels)
        level = _draw(table.reshape(-1, levels), generator)
    return grid[level].reshape(x.shape).to(torch.float32)


def _draw(table: Tensor, generator: torch.Generator) -> Tensor:
    """One category per row of a (rows, L) probability table, by inverting the CDF."""
    u = torch.rand(table.shape[0], 1, generator=generator, dtype=torch.float64)
    return (table.cumsum(-1) < u).sum(-1).clamp(max=table.shape[1] - 1)


def flip_probability(eps: float) -> float:
    """p = 1 / (1 + e^eps): randomised response keeps a bit with e^eps / (1 + e^eps) (Eq. 22)."""
    _check_budget(eps)
    return 1.0 / (1.0 + math.exp(eps))


def link_probabilities(eps: float) -> Tensor:
    """The exact table of M_e: entry [a, b] = Pr[output b | input a], for bits a, b in {0, 1}."""
    p = flip_probability(eps)
    return torch.tensor([[1 - p, p], [p, 1 - p]], dtype=torch.float64)


def randomise_bits(bits: Tensor, eps: float, generator: torch.Generator) -> Tensor:
    """Randomised response on each bit independently (eps-LDP per bit, Theorem V.2)."""
    flip = torch.rand(bits.shape, generator=generator, dtype=torch.float64) < flip_probability(eps)
    return bits.bool() ^ flip


def _symmetric(upper_bits: Tensor, size: int) -> Tensor:
    """The b x b symmetric matrix with zero diagonal whose upper triangle (row-major) is
    ``upper_bits``."""
    rows, cols = torch.triu_indices(size, size, 1)
    out = torch.zeros(size, size, dtype=torch.bool)
    out[rows, cols] = upper_bits
    out[cols, rows] = upper_bits
    return out


def _upper(adjacency: Tensor) -> Tensor:
    rows, cols = torch.triu_indices(len(adjacency), len(adjacency), 1)
    return adjacency[rows, cols].bool()


def randomise_links(adjacency: Tensor, eps: float, generator: torch.Generator) -> Tensor:
    """M_e (Eq. 22): randomised response on the upper triangle of the b x b adjacency among the
    sampled nodes, mirrored, with a zero diagonal, so each undirected pair is privatised once."""
    return _symmetric(randomise_bits(_upper(adjacency), eps, generator), len(adjacency))


def corrected_density(noisy_density: float, eps: float) -> float:
    """Theorem V.3: a true 1-fraction rho becomes rho' = rho (1 - p) + (1 - rho) p in
    expectation, so rho_hat = (rho' - p) / (1 - 2p), clipped to [0, rho'] (unbiased while the
    clip is inactive)."""
    p = flip_probability(eps)
    return min(max((noisy_density - p) / (1 - 2 * p), 0.0), noisy_density)


def sparsify_links(noisy: Tensor, encodings: Tensor, eps: float) -> Tensor:
    """The sparsity correction (Sec. V-A, Theorem V.3): of the ones of the randomised adjacency,
    keep the floor(rho_hat * #pairs) whose endpoints' *privatised* encodings are closest
    (Euclidean; ties by pair order) and zero the rest. Post-processing: no privacy cost."""
    size = len(noisy)
    upper = _upper(noisy)
    pairs = upper.numel()
    if pairs == 0:
        return noisy.bool().clone()
    keep = math.floor(corrected_density(upper.sum().item() / pairs, eps) * pairs)
    rows, cols = torch.triu_indices(size, size, 1)
    enc = encodings.to(torch.float64)
    distance = (enc[rows] - enc[cols]).norm(dim=1).masked_fill(~upper, math.inf)
    order = torch.sort(distance, stable=True).indices
    kept = torch.zeros(pairs, dtype=torch.bool)
    kept[order[:keep]] = True
    return _symmetric(kept & upper, size)


def pack_bits(adjacency: Tensor) -> Tensor:
    """The FULL b x b bit matrix, row-major, eight bits to a uint8 byte (most significant bit
    first, zero-padded): ceil(b^2 / 8) bytes, 512 B at b = 64, the count of the paper's Table IV
    (which counts b^2 bits, not the b(b-1)/2 of the upper triangle)."""
    bits = adjacency.reshape(-1).bool()
    padded = torch.zeros(-(-bits.numel() // 8) * 8, dtype=torch.uint8)
    padded[: bits.numel()] = bits.to(torch.uint8)
    weights = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8)
    return (padded.view(-1, 8) * weights).sum(-1, dtype=torch.uint8)


def unpack_bits(packed: Tensor, size: int) -> Tensor:
    """The inverse of ``pack_bits``: a ``size`` x ``size`` bool matrix."""
    if packed.numel() * 8 < size * size:
        raise GraphfedError(f"{packed.numel()} packed bytes cannot hold a {size}x{size} matrix")
    shifts = torch.arange(7, -1, -1, dtype=torch.uint8)
    bits = (packed.to(torch.uint8).unsqueeze(-1) >> shifts) & 1
    return bits.reshape(-1)[: size * size].bool().view(size, size)


def empty_rr_cache(enc_dim: int) -> RRCache:
    """A client's cache of released values (App. F-A), keyed by its local node ids and by
    unordered pairs of them, with how often each was released (for the accounting)."""
    return {
        "node_ids": torch.zeros(0, dtype=torch.long),
        "node_values": torch.zeros(0, enc_dim, dtype=torch.float32),
        "node_releases": torch.zeros(0, dtype=torch.long),
        "pair_keys": torch.zeros(0, dtype=torch.long),
        "pair_bits": torch.zeros(0, dtype=torch.bool),
        "pair_releases": torch.zeros(0, dtype=torch.long),
    }


def _release(keys: Tensor, values: Tensor, releases: Tensor, request: Tensor,
             fresh: Callable[[Tensor], Tensor], permanent: bool
             ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Values for the ``request``ed keys (distinct): cached ones when ``permanent`` and known,
    ``fresh(mask)`` for the rest. The cache keeps each key's latest release, sorted by key."""
    position = torch.searchsorted(keys, request)
    known = torch.zeros(len(request), dtype=torch.bool)
    if len(keys):
        known = (position < len(keys)) & (keys[position.clamp(max=len(keys) - 1)] == request)
    needed = ~known if permanent else torch.ones(len(request), dtype=torch.bool)
    out = torch.empty(len(request), *values.shape[1:], dtype=values.dtype)
    out[~needed] = values[position[~needed]]
    out[needed] = fresh(needed).to(values.dtype)
    values, releases = values.clone(), releases.clone()
    values[position[known]] = out[known]
    releases[position[known]] += 1
    keys = torch.cat([keys, request[~known]])
    order = torch.argsort(keys)
    values = torch.cat([values, out[~known]])[order]
    releases = torch.cat([releases, torch.ones(int((~known).sum()), dtype=torch.long)])[order]
    return out, keys[order], values, releases


def _distinct(node_ids: Tensor) -> Tensor:
    node_ids = node_ids.long()
    if len(node_ids.unique()) != len(node_ids):
        raise GraphfedError("a released sample must not repeat a node")
    if len(node_ids) and (node_ids.min() < 0 or node_ids.max() >= 1 << _PAIR_SHIFT):
        raise GraphfedError(f"local node ids must lie in [0, 2^{_PAIR_SHIFT})")
    return node_ids


def release_features(cache: RRCache, node_ids: Tensor, encodings: Tensor,
                     privatise: Callable[[Tensor], Tensor], permanent: bool = True
                     ) -> tuple[Tensor, RRCache]:
    """The privatised encodings of the sampled nodes ``node_ids`` (rows of ``encodings``) and the
    updated cache. With permanent randomised response (App. F-A) a node privatised before is
    re-sent unchanged, so averaging repeated queries learns nothing new; without it every query
    is a fresh ``privatise`` draw. The input cache is not modified."""
    node_ids = _distinct(node_ids)
    out, ids, values, releases = _release(
        cache["node_ids"], cache["node_values"], cache["node_releases"], node_ids,
        lambda needed: privatise(encodings[needed]), permanent)
    return out, {**cache, "node_ids": ids, "node_values": values, "node_releases": releases}


def release_links(cache: RRCache, node_ids: Tensor, adjacency: Tensor, eps: float,
                  generator: torch.Generator, permanent: bool = True) -> tuple[Tensor, RRCache]:
    """M_e on the b x b adjacency among the sampled nodes ``node_ids`` (in that order) through
    the cache: each unordered pair's bit is randomised once and re-sent (App. F-A; spec §6.5).
    Returns the symmetric bool matrix with zero diagonal and the updated cache."""
    node_ids = _distinct(node_ids)
    rows, cols = torch.triu_indices(len(node_ids), len(node_ids), 1)
    low = torch.minimum(node_ids[rows], node_ids[cols])
    high = torch.maximum(node_ids[rows], node_ids[cols])
    true_bits = _upper(adjacency)
    out, keys, bits, releases = _release(
        cache["pair_keys"], cache["pair_bits"], cache["pair_releases"],
        low << _PAIR_SHIFT | high,
        lambda needed: randomise_bits(true_bits[needed], eps, generator), permanent)
    return (_symmetric(out, len(node_ids)),
            {**cache, "pair_keys": keys, "pair_bits": bits, "pair_releases": releases})


def privacy_spent(cache: RRCache, eps_v: float, eps_e: float, permanent: bool = True
                  ) -> dict[str, float]:
    """The LDP budget spent so far by the worst-off node and link of one client.

    ``eps_element`` is eps_v; a node's encoding costs d_enc * eps_v (basic composition over its
    dimensions, spec §6.8) per paid release and a link eps_e. With permanent randomised response
    only the first release is paid, so nothing composes over rounds; without it every re-query
    composes. Record it every round (it is cumulative: the last value is the run's total).
    """
    node_releases = int(cache["node_releases"].max()) if len(cache["node_releases"]) else 0
    pair_releases = int(cache["pair_releases"].max()) if len(cache["pair_releases"]) else 0
    if permanent:
        node_releases, pair_releases = min(node_releases, 1), min(pair_releases, 1)
    enc_dim = cache["node_values"].shape[1]
    return {"eps_element": eps_v, "eps_node": enc_dim * eps_v * node_releases,
            "eps_link": eps_e * pair_releases}


def majority_vote_accuracy(eps: float, queries: int) -> float:
    """Table V (App. F-A), exactly: the probability that the majority of ``queries`` independent
    randomised-response replies of one link bit (no permanent response) equals the bit, ties
    broken by a fair coin. A binomial sum over the number of truthful replies."""
    keep = 1.0 - flip_probability(eps)
    total = 0.0
    for truthful in range(queries + 1):
        mass = math.comb(queries, truthful) * keep**truthful * (1 - keep) ** (queries - truthful)
        total += mass if 2 * truthful > queries else mass / 2 if 2 * truthful == queries else 0.0
    return total


def majority_vote_attack(bits: Tensor, eps: float, queries: int,
                         generator: torch.Generator) -> float:
    """Table V by simulation: the attacker queries each of the links ``bits`` ``queries`` times,
    takes the majority of the randomised replies (ties by a coin from ``generator``) and scores
    the share it reconstructs correctly."""
    bits = bits.bool().reshape(-1)
    replies = randomise_bits(bits.expand(queries, -1), eps, generator).sum(0) * 2
    coin = torch.rand(bits.shape, generator=generator) < 0.5
    guess = torch.where(replies == queries, coin, replies > queries)
    return (guess == bits).double().mean().item()
