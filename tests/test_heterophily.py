"""The heterophilous node sets load by name with the counts the staged README gives (what PyG,
or numpy for the filtered pair, returned), their published splits kept as mask columns."""

import numpy as np
import pytest
import torch

from graphfed.data import load_dataset
from graphfed.data.datasets import DatasetError, canonical_name
from tests.conftest import require

# name: nodes, edges as loaded, features, classes, edge homophily (staged README; None: not given)
STAGED = {"Minesweeper": (10_000, 78_804, 7, 2, 0.683),
          "Tolokers": (11_758, 1_038_000, 10, 2, 0.595),
          "Actor": (7_600, 30_019, 932, 5, 0.219),
          "Texas": (183, 325, 1_703, 5, 0.108),
          "Cornell": (183, 298, 1_703, 5, 0.305),
          "Wisconsin": (251, 515, 1_703, 5, 0.196),
          # the file's 8,854 and 46,998 directed pairs, made undirected as PyG's reader does
          "Chameleon-filtered": (890, 17_708, 2_325, 5, None),
          "Squirrel-filtered": (2_223, 93_996, 2_089, 5, None)}


def edge_homophily(graph) -> float:
    source, target = graph.edge_index
    return float((graph.y[source] == graph.y[target]).float().mean())


@pytest.mark.parametrize("name", [pytest.param(n, marks=require(n)) for n in sorted(STAGED)])
def test_heterophilous_sets_match_the_staged_statistics_and_keep_ten_splits(name):
    nodes, edges, features, classes, homophily = STAGED[name]
    data = load_dataset(name.lower())  # any case
    graph = data.graph
    assert (graph.num_nodes, graph.edge_index.size(1)) == (nodes, edges)
    assert (data.num_features, data.num_classes) == (features, classes)
    if homophily is not None:
        assert edge_homophily(graph) == pytest.approx(homophily, abs=5e-4)
    train, val, test = data.splits
    assert train.shape == val.shape == test.shape == (nodes, 10)
    # in every split a node is in at most one part
    assert int((train.int() + val.int() + test.int()).max()) == 1
    assert bool((train.sum(0) > 0).all() and (test.sum(0) > 0).all())


@require("Chameleon-filtered")
def test_the_filtered_sets_are_undirected_and_keep_the_files_splits():
    from graphfed.data.datasets import data_root

    data = load_dataset("Chameleon-filtered")
    source, target = data.graph.edge_index
    forward = set(zip(source.tolist(), target.tolist(), strict=True))
    assert all((t, s) in forward for s, t in forward)
    with np.load(data_root() / "HeterophilyFiltered/chameleon_filtered/raw/"
                 "chameleon_filtered.npz") as raw:
        assert torch.equal(data.splits[2], torch.from_numpy(raw["test_masks"]).bool().t())


def test_the_new_names_resolve_and_a_planetoid_set_has_no_published_splits(cora):
    assert canonical_name("squirrel_filtered") == "Squirrel-filtered"
    assert canonical_name("WISCONSIN") == "Wisconsin"
    assert cora.splits is None
    with pytest.raises(DatasetError, match="Chameleon-filtered"):
        canonical_name("chameleon")  # the unfiltered one is not staged: the list names the other
