"""GPFL's Fig. 1 split (``partition=gpfl_toy``): two groups of clients whose label
distributions are alike at rate 0.5 and ever more opposite above it; per-client folds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from graphfed.data.partition.gpfl import gpfl_toy_split, toy_groups
from graphfed.data.partition.options import PARTITIONS
from graphfed.data.partition.plan import TEST, TRAIN
from graphfed.errors import GraphfedError

LABELS = torch.tensor([0, 1] * 200)  # 400 balanced graphs


def class0_share(ids: torch.Tensor) -> float:
    return float((LABELS[ids] == 0).double().mean())


@pytest.mark.parametrize(("rate", "share"), [(0.5, 0.5), (0.7, 0.7), (0.9, 0.9)])
def test_group_zero_holds_the_rate_of_class_zero_and_half_the_graphs(rate, share):
    first, second = toy_groups(LABELS.numpy(), rate, np.random.RandomState(0))
    assert len(first) == len(second) == 200
    assert set(first).isdisjoint(second)
    assert class0_share(torch.from_numpy(first)) == pytest.approx(share)
    assert class0_share(torch.from_numpy(second)) == pytest.approx(1 - share)


def test_each_side_keeps_ten_graphs_of_every_class():
    first, second = toy_groups(LABELS.numpy(), 1.0, np.random.RandomState(0))
    assert (LABELS[torch.from_numpy(second)] == 0).sum() == 10
    assert (LABELS[torch.from_numpy(first)] == 1).sum() == 10


def test_clients_of_a_group_are_alike_and_the_groups_apart():
    plan = gpfl_toy_split(LABELS, 4, 0.9, folds=5, fold=0, seed=0)
    shares = [class0_share(ids) for ids in plan.client_ids]
    assert shares == pytest.approx([0.9, 0.9, 0.1, 0.1], abs=0.02)
    assert sorted(torch.cat(plan.client_ids).tolist()) == list(range(400))
    for split in plan.client_splits:
        assert (split == TEST).float().mean() == pytest.approx(0.2, abs=0.02)
        assert set(split.tolist()) == {TRAIN, TEST}


@pytest.mark.parametrize(("clients", "labels", "message"), [
    (3, LABELS, "must be even"),
    (4, torch.tensor([0, 1, 2] * 50), "binary labels only"),
    (120, LABELS, "200 graphs over 60 clients leaves 3 per client"),
])
def test_splits_it_cannot_make_are_refused(clients, labels, message):
    with pytest.raises(GraphfedError, match=message):
        gpfl_toy_split(labels, clients, 0.7, folds=5, fold=0, seed=0)


def test_the_options_refuse_a_global_test_and_rates_below_a_half():
    options = PARTITIONS["gpfl_toy"]
    assert options(rate=0.8).rate == 0.8
    with pytest.raises(ValueError, match="gpfl_toy has no global test set"):
        options(global_test=0.1)
    with pytest.raises(ValueError, match=r"greater than or equal to 0\.5"):
        options(rate=0.3)
