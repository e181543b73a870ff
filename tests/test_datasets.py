import pytest
import torch

from graphfed.data import load_dataset
from graphfed.data.datasets import DatasetError, available, is_present, missing_files
from tests.conftest import require


@require("Cora")
def test_cora_matches_published_statistics(cora):
    assert cora.level == "node"
    assert cora.graph.num_nodes == 2708
    assert cora.graph.edge_index.size(1) == 10556
    assert (cora.num_features, cora.num_classes) == (1433, 7)


@require("PROTEINS")
def test_proteins_graphs(proteins):
    assert proteins.level == "graph"
    assert len(proteins.graphs) == 1113
    assert proteins.num_classes == 2 and proteins.num_features == 3


@require("IMDB-BINARY")
def test_featureless_dataset_gets_one_hot_degrees():
    data = load_dataset("imdb-binary")
    assert data.num_features == 136  # max degree 135, as OneHotDegree(135) in the papers
    g = data.graphs[0]
    degree = torch.bincount(g.edge_index[0], minlength=g.num_nodes)
    assert torch.equal(g.x.argmax(1), degree)
    assert torch.all(g.x.sum(1) == 1)


def test_names_resolve_ignoring_case_and_separators():
    from graphfed.data.datasets import canonical_name

    assert canonical_name("cora") == "Cora"
    assert canonical_name("cora-ml") == "Cora_ML"
    assert canonical_name("imdb_binary") == "IMDB-BINARY"


def test_unknown_dataset_lists_choices():
    with pytest.raises(DatasetError, match=r"unknown dataset 'nope'.*Cora.*PROTEINS"):
        load_dataset("nope")


def test_missing_dataset_says_so_and_lists_present(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHFED_DATA", str(tmp_path))
    assert not is_present("PubMed")
    assert missing_files("PubMed")
    with pytest.raises(DatasetError, match="'PubMed' is not present"):
        load_dataset("PubMed")


@require("Cora")
def test_processing_writes_to_the_cache_not_the_data_root(tmp_path, monkeypatch):
    import os
    import shutil
    from pathlib import Path

    staged = Path(os.environ["GRAPHFED_DATA"]) / "Planetoid" / "Cora" / "raw"
    copy = tmp_path / "data" / "Planetoid" / "Cora" / "raw"
    shutil.copytree(staged, copy)
    monkeypatch.setenv("GRAPHFED_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("GRAPHFED_CACHE", str(tmp_path / "cache"))
    assert load_dataset("Cora").graph.num_nodes == 2708
    assert sorted(p.name for p in (tmp_path / "data" / "Planetoid" / "Cora").iterdir()) == ["raw"]
    assert list((tmp_path / "cache").rglob("processed"))


def test_csbm_is_deterministic_and_homophilous():
    a = load_dataset("csbm", {"nodes": 500, "classes": 3, "homophily": 0.9, "seed": 1})
    b = load_dataset("csbm", {"nodes": 500, "classes": 3, "homophily": 0.9, "seed": 1})
    assert torch.equal(a.graph.edge_index, b.graph.edge_index)
    assert torch.equal(a.graph.x, b.graph.x)
    from graphfed.data.stats import edge_homophily

    h = edge_homophily(a.graph.edge_index, a.graph.y)
    assert 0.85 < h < 0.95
    low = load_dataset("csbm", {"nodes": 500, "classes": 3, "homophily": 0.1, "seed": 1})
    assert edge_homophily(low.graph.edge_index, low.graph.y) < 0.2


def test_every_listed_dataset_has_a_status():
    assert "csbm" in available()
    for name in available():
        assert isinstance(is_present(name), bool)
