"""FGFL's payoff baselines and the exact Shapley value."""

import math

import pytest

from graphfed.mechanisms.payoff import (
    PAYOFF_BASELINES,
    shapley_values,
    union_payoff,
    volume_utility,
)

SIZES = [120, 80, 80, 45, 200, 10, 95, 60, 150, 30]


def test_exact_shapley_is_efficient():
    value = volume_utility(SIZES)
    phi = shapley_values(len(SIZES), value)
    assert sum(phi) == pytest.approx(value((1 << len(SIZES)) - 1))
    assert sum(phi) == pytest.approx(math.log1p(sum(SIZES)))


def test_exact_shapley_is_symmetric_and_monotone_in_data():
    phi = shapley_values(len(SIZES), volume_utility(SIZES))
    assert phi[1] == pytest.approx(phi[2])  # equal data, equal value
    assert phi[4] > phi[0] > phi[3] > phi[5]


def test_shapley_of_an_additive_game_is_each_players_own_value():
    weights = [1.0, 2.0, 5.0]
    phi = shapley_values(3, lambda m: sum(w for i, w in enumerate(weights) if m >> i & 1))
    assert phi == pytest.approx(weights)


@pytest.mark.parametrize("name", sorted(PAYOFF_BASELINES))
def test_payoffs_spend_exactly_the_budget(name):
    payoff = PAYOFF_BASELINES[name](SIZES, 2.5)
    assert sum(payoff) == pytest.approx(2.5)
    assert all(p > 0 for p in payoff)


def test_union_payoff_is_proportional_to_marginal_loss():
    total = math.log1p(sum(SIZES))
    marginal = [total - math.log1p(sum(SIZES) - n) for n in SIZES]
    expected = [m / sum(marginal) for m in marginal]
    assert union_payoff(SIZES) == pytest.approx(expected)
