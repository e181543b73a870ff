"""GPFL's Fig. 5 statistic (``reproduce.network_stats``) on hand-made networks, and the
``gpfl-network`` preset end to end."""

import json
import math

import pytest
import torch

from graphfed.reproduce.network_stats import (
    grouping,
    label_distributions,
    label_order,
    label_similarity,
)
from tests.conftest import require

# four clients: two mostly of class 0, two mostly of class 1
SKEWED = torch.tensor([[0.9, 0.1], [0.2, 0.8], [0.7, 0.3], [0.1, 0.9]], dtype=torch.float64)
BLOCKS = torch.tensor([[0.0, 0.1, 0.9, 0.0], [0.0, 0.0, 0.1, 0.9],
                       [0.9, 0.1, 0.0, 0.0], [0.1, 0.9, 0.0, 0.0]])


def test_a_network_linking_like_labelled_clients_groups_them():
    stats = grouping(BLOCKS, SKEWED)
    assert stats["within"] == pytest.approx(0.9)
    assert stats["between"] == pytest.approx(0.05)
    assert stats["ratio"] == pytest.approx(18.0)
    assert stats["correlation"] > 0.5


def test_a_network_linking_unlike_clients_correlates_negatively():
    stats = grouping(1 - BLOCKS - torch.eye(4), SKEWED)
    assert stats["ratio"] < 1 and stats["correlation"] < 0


def test_a_uniform_network_is_blind_to_the_labels():
    stats = grouping(torch.full((4, 4), 0.25), SKEWED)
    assert stats["ratio"] == pytest.approx(1.0)
    assert math.isnan(stats["correlation"])  # a constant network correlates with nothing


def test_one_label_group_has_no_between_mean():
    same = torch.tensor([[0.9, 0.1]] * 3, dtype=torch.float64)
    stats = grouping(torch.rand(3, 3), same)
    assert math.isnan(stats["between"]) and math.isnan(stats["ratio"])


def test_a_network_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="network for 4 clients"):
        grouping(torch.zeros(3, 3), SKEWED)


def test_distributions_similarity_and_order():
    dist = label_distributions([torch.tensor([0, 0, 1]), torch.tensor([1, 1]),
                                torch.tensor([], dtype=torch.long)], num_classes=2)
    assert torch.allclose(dist, torch.tensor([[2 / 3, 1 / 3], [0.0, 1.0], [0.0, 0.0]],
                                             dtype=torch.float64))
    similarity = label_similarity(SKEWED)
    assert similarity.diagonal().tolist() == pytest.approx([1.0] * 4)
    assert float(similarity[0, 3]) == pytest.approx(0.2)
    assert label_order(SKEWED) == [0, 2, 3, 1]


@require("PROTEINS")
def test_the_network_preset_draws_the_network_and_writes_its_statistic(tmp_path):
    from graphfed.reproduce.runner import reproduce

    out, rows, _ = reproduce("gpfl-network", datasets=["PROTEINS"], out=tmp_path,
                             progress=False, overrides=("num_clients=5", "rounds=2"))
    assert [(r["method"], r["dataset"]) for r in rows] == [("gpfl", "PROTEINS/k=25/alpha=0.5")]
    assert (out / "network-PROTEINS_k=25_alpha=0.5.png").stat().st_size > 0
    found = json.loads((out / "network.json").read_text())["PROTEINS/k=25/alpha=0.5"]
    assert found["rounds"] == 2 and sorted(found["order"]) == list(range(5))
    assert len(found["network"]) == len(found["label_distribution"]) == 5
    assert all(math.isfinite(found[key]) for key in ("within", "between"))
    assert {"ratio", "correlation"} <= found.keys()


def test_known_groups_replace_the_majority_labels():
    alike = torch.tensor([[0.6, 0.4]] * 4, dtype=torch.float64)  # one majority label for all
    assert math.isnan(grouping(BLOCKS, alike)["between"])
    stats = grouping(BLOCKS, alike, groups=torch.tensor([0, 1, 0, 1]))
    assert stats["ratio"] == pytest.approx(18.0)
