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
    from graphfed.data.datasets import _key, canonical_name

    assert canonical_name("cora") == "Cora"
    assert canonical_name("cora-ml") == "Cora_ML"
    assert canonical_name("imdb_binary") == "IMDB-BINARY"
    assert canonical_name("citeseer") == "CiteSeer"  # Planetoid's; CitationFull's has its own name
    for spelling in ("CiteSeerFull", "citeseer-full", "CITESEER_FULL"):
        assert canonical_name(spelling) == "CiteSeerFull"
    assert canonical_name("coauthor_physics") == "Coauthor-Physics"
    assert canonical_name("RedditBinary") == "REDDIT-BINARY"
    assert len({_key(n) for n in available()}) == len(available())  # no two names collide


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


# the staged datasets README: nodes, directed edges as loaded, features, classes
NEW_NODE_DATASETS = [
    ("Amazon-Computers", 13_752, 491_722, 767, 10),
    ("Coauthor-CS", 18_333, 163_788, 6_805, 15),
    ("Coauthor-Physics", 34_493, 495_924, 8_415, 5),
    ("DBLP", 17_716, 105_734, 1_639, 4),
    ("CiteSeerFull", 4_230, 10_674, 602, 6),
]


@pytest.mark.parametrize(("name", "nodes", "edges", "features", "classes"),
                         [pytest.param(*row, marks=require(row[0])) for row in NEW_NODE_DATASETS])
def test_new_node_datasets_match_the_staged_statistics(name, nodes, edges, features, classes):
    data = load_dataset(name)
    assert (data.name, data.level) == (name, "node")
    assert data.graph.num_nodes == nodes and data.graph.edge_index.size(1) == edges
    assert data.graph.x.shape == (nodes, features) and data.graph.x.dtype == torch.float32
    assert data.num_classes == classes and data.graph.y.shape == (nodes,)


REDDIT_CAP = 135  # the one-hot degree cap in REDDIT-BINARY's spec


@pytest.fixture(scope="module")
def reddit():
    """REDDIT-BINARY, loaded once, with how far the load raised the process's peak memory (less
    than the load used if an earlier test peaked higher, but the uncapped one-hot's 10 GB shows)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    data = load_dataset("REDDIT-BINARY")
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024  # KiB on Linux
    return data, grown


@require("REDDIT-BINARY")
def test_reddit_binary_matches_the_staged_statistics(reddit):
    data, _ = reddit
    assert data.level == "graph" and len(data.graphs) == 2_000 and data.num_classes == 2
    assert sum(g.num_nodes for g in data.graphs) == 859_254
    assert sum(g.edge_index.size(1) for g in data.graphs) == 1_991_016
    assert torch.bincount(torch.cat([g.y for g in data.graphs])).tolist() == [1_000, 1_000]


@require("REDDIT-BINARY")
def test_reddit_binary_gets_capped_one_hot_degrees(reddit):
    data, _ = reddit
    assert data.num_features == REDDIT_CAP + 1
    max_degree = 0
    for g in data.graphs:
        degree = torch.bincount(g.edge_index[0], minlength=g.num_nodes)
        max_degree = max(max_degree, int(degree.max()))
        assert g.x.shape == (g.num_nodes, REDDIT_CAP + 1) and g.x.dtype == torch.float32
        assert int(g.x.count_nonzero()) == g.num_nodes and torch.all(g.x.sum(1) == 1)
        assert torch.equal(g.x.argmax(1), degree.clamp(max=REDDIT_CAP))
    assert max_degree == 3_062  # the hubs the cap is there for: all in the last column


@require("REDDIT-BINARY")
def test_reddit_binary_fits_a_sane_memory_budget(reddit):
    data, grown = reddit
    feature_bytes = sum(g.x.numel() * g.x.element_size() for g in data.graphs)
    assert feature_bytes == 859_254 * (REDDIT_CAP + 1) * 4  # 467 MB; uncapped it would be 10.5 GB
    assert grown < 1.5 * 2**30


@pytest.mark.parametrize("name", [pytest.param(n, marks=require(n)) for n in
                                  [row[0] for row in NEW_NODE_DATASETS] + ["REDDIT-BINARY"]])
def test_datasets_command_lists_the_new_datasets_as_present(name):
    from typer.testing import CliRunner

    from graphfed.cli import app

    result = CliRunner().invoke(app, ["datasets"])
    assert result.exit_code == 0, result.output
    row = [line for line in result.output.splitlines() if f" {name} " in line]
    assert len(row) == 1 and "present" in row[0], result.output


def test_a_download_that_cannot_reach_the_network_is_one_clear_error(tmp_path, monkeypatch):
    import torch_geometric.datasets as pyg_datasets

    def offline(*args, **kwargs):
        raise ConnectionError("Cannot connect to host: Name or service not known")

    monkeypatch.delenv("GRAPHFED_DATA", raising=False)
    monkeypatch.setenv("GRAPHFED_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pyg_datasets, "Planetoid", offline)
    with pytest.raises(DatasetError, match=r"'Cora' could not be fetched or read .*GRAPHFED_DATA"):
        load_dataset("Cora")


def test_csbm_features_do_not_depend_on_the_construction_chunk(monkeypatch):
    from graphfed.data import synthetic

    options = synthetic.CSBMOptions(nodes=300, classes=3, features=5, seed=2)
    whole = synthetic.contextual_sbm(options)
    monkeypatch.setattr(synthetic, "CHUNK", 7)
    chunked = synthetic.contextual_sbm(options)
    assert torch.equal(whole.x, chunked.x)
    # every row holds its class mean: noise of mean zero around it, the classes apart
    centred = [chunked.x[chunked.y == k].mean(0) for k in range(3)]
    assert min(float((a - b).norm()) for a in centred for b in centred if a is not b) > 0.5
