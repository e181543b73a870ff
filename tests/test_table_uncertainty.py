"""Uncertainty in reproduction tables: the Student-t interval over seeds, and a row marked best
only when its interval clears the runner-up's."""

from __future__ import annotations

import csv
import math

import pytest

from graphfed.metrics import t_interval
from graphfed.reproduce.score import RoundValue, register_metrics
from graphfed.reproduce.write import clear_winners, write_tables

ACC, LOSS = register_metrics({"uncertainty_test_acc": RoundValue("test_acc"),
                              "uncertainty_test_loss": RoundValue("test_loss")})


def test_t_interval_is_the_student_interval_of_the_mean():
    low, high = t_interval([0.80, 0.82, 0.84])
    # t_{0.975, 2} = 4.302653; sample std 0.02; sqrt(3) seeds
    half = 4.302653 * 0.02 / math.sqrt(3)
    assert (low, high) == pytest.approx((0.82 - half, 0.82 + half), abs=1e-6)
    assert t_interval([0.8]) is None and t_interval([]) is None
    narrow = t_interval([0.80, 0.82, 0.84] * 4)
    assert narrow[1] - narrow[0] < high - low  # more seeds, a narrower interval


def row(method: str, metric: str, mean: float, low: float | None, high: float | None) -> dict:
    return {"method": method, "dataset": "Cora", "metric": metric, "ours_mean": mean,
            "ours_std": 0.01, "ci_low": low, "ci_high": high, "n_seeds": 3, "paper": "",
            "select": "final", "nan_seeds": 0}


def test_best_only_when_its_interval_clears_the_runner_up():
    clear = [row("a", ACC, 0.90, 0.88, 0.92), row("b", ACC, 0.85, 0.83, 0.87),
             row("c", ACC, 0.70, 0.60, 0.80)]
    assert clear_winners(clear) == {0}
    overlapping = [row("a", ACC, 0.90, 0.86, 0.94), row("b", ACC, 0.88, 0.85, 0.91)]
    assert clear_winners(overlapping) == set()
    # lower is better for a loss: the smallest mean wins when its interval lies below
    losses = [row("a", LOSS, 0.50, 0.45, 0.55), row("b", LOSS, 0.30, 0.28, 0.32)]
    assert clear_winners(losses) == {1}
    # one seed: no interval, no claim; a setting with a single row: nothing to beat
    assert clear_winners([row("a", ACC, 0.9, None, None), row("b", ACC, 0.5, None, None)]) == set()
    assert clear_winners([row("a", ACC, 0.9, 0.89, 0.91)]) == set()


def test_tables_carry_the_interval_and_the_seed_count(tmp_path):
    rows = [row("a", ACC, 0.90, 0.88, 0.92), row("b", ACC, 0.85, 0.83, 0.87)]
    write_tables(rows, tmp_path, "t", "", "final")
    with (tmp_path / "table.csv").open() as f:
        written = list(csv.DictReader(f))
    assert [(r["ci_low"], r["ci_high"], r["n_seeds"]) for r in written] == [
        ("0.8800", "0.9200", "3"), ("0.8300", "0.8700", "3")]
    md = (tmp_path / "table.md").read_text().splitlines()
    assert "| a | Cora | uncertainty_test_acc | **0.900 ± 0.010** | [0.880, 0.920] | 3 |" in (
        "\n".join(md))
    assert any(line.startswith("| b |") and "**" not in line for line in md)
