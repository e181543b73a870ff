"""FED-PUB's METIS protocol on the staged Cora: the largest component only, one global split
drawn before the cut, disjoint clients or five overlapping ones per community."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.data.federated import build_partition
from graphfed.data.partition import parse_partition
from graphfed.data.partition.fedpub import largest_component
from graphfed.data.partition.plan import TEST, TRAIN, VAL
from tests.conftest import error_line, require

pytestmark = require("Cora")
CORA_LCC = 2_485  # FED-PUB's LargestConnectedComponents on Cora


def plan(cora, name: str, clients: int, seed: int = 0):
    return parse_partition(name).plan(cora.graph, cora.graph.y, clients, seed,
                                      np.random.default_rng(seed), "Cora")


def test_disjoint_clients_tile_the_largest_component_and_its_split_is_drawn_once(cora):
    keep = largest_component(cora.graph)
    assert len(keep) == CORA_LCC
    split = plan(cora, "fedpub_disjoint", 10)
    ids = torch.cat(split.client_ids)
    assert len(split.client_ids) == 10 and len(split.global_test) == 0
    assert torch.equal(torch.sort(ids).values, keep)  # every component node, once
    codes = torch.cat(split.client_splits)
    # split_train's counts over the whole component: round(0.2 n) train, round(0.4 n) test
    assert [int((codes == c).sum()) for c in (TRAIN, TEST, VAL)] == [497, 994, 994]
    assert all(int((c == TRAIN).sum()) > 0 for c in split.client_splits)


def test_overlapping_clients_are_halves_of_their_community_and_share_nodes_only_within_it(cora):
    split = plan(cora, "fedpub_overlapping", 10)  # 2 METIS communities x 5 clients
    sets = [set(ids.tolist()) for ids in split.client_ids]
    communities = [set().union(*sets[i:i + 5]) for i in (0, 5)]
    assert not communities[0] & communities[1]
    for first in (0, 5):  # each client a half of one community: five of one size
        assert len({len(s) for s in sets[first:first + 5]}) == 1
        assert len(communities[first // 5]) > len(sets[first])
    assert sets[0] & sets[1] and not sets[0] & sets[5]
    # a node keeps the split it was drawn for whichever client holds it
    code = {}
    for ids, codes in zip(split.client_ids, split.client_splits, strict=True):
        for node, c in zip(ids.tolist(), codes.tolist(), strict=True):
            assert code.setdefault(node, c) == c
    assert split.overlap["node"][0, 1] > 0.3 and split.overlap["node"][0, 5] == 0


def test_the_same_seed_gives_the_same_clients_and_another_seed_other_ones(cora):
    options = parse_partition("fedpub_disjoint")
    first = build_partition(cora, options, 5, seed=3)
    again = build_partition(cora, options, 5, seed=3)
    other = build_partition(cora, options, 5, seed=4)
    assert all(torch.equal(a, b) for a, b in zip(first.client_splits, again.client_splits,
                                                 strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(first.client_splits, other.client_splits,
                                                     strict=True))


@pytest.mark.parametrize(("overrides", "message"), [
    (["partition=fedpub_overlapping", "num_clients=7"], "multiple of 5, got 7"),
    (["partition=fedpub_disjoint", "partition.global_test=0.2"], "no global test set"),
])
def test_a_setting_the_protocol_cannot_serve_is_one_line(tmp_path, overrides, message):
    result = CliRunner().invoke(app, ["run", "configs/quickstart.yaml", *overrides, "--out",
                                      str(tmp_path / "r"), "--quiet"])
    assert message in error_line(result)
