import numpy as np
import pytest
import torch
from pydantic import ValidationError

from graphfed.data import build_partition, materialize, parse_partition
from graphfed.data.federated import _node_client, _node_clients
from graphfed.data.partition.graph import flip_edges
from graphfed.data.partition.node import metis_adjacency, metis_split
from graphfed.errors import GraphfedError
from tests.conftest import require


def _label_skew(parts, labels, num_classes):
    """Mean total-variation distance between each client's label distribution and the global."""
    overall = torch.bincount(labels, minlength=num_classes).double()
    overall /= overall.sum()
    distances = []
    for ids in parts:
        counts = torch.bincount(labels[ids], minlength=num_classes).double()
        distances.append(0.5 * float((counts / counts.sum() - overall).abs().sum()))
    return float(np.mean(distances))


@require("Cora")
@pytest.mark.parametrize("spec", ["louvain", "metis", "dirichlet", {"name": "uniform"}])
def test_node_partitions_are_deterministic_and_cover_every_node_once(cora, spec):
    options = parse_partition(spec)
    a = build_partition(cora, options, 10, seed=3)
    b = build_partition(cora, options, 10, seed=3)
    assert a.id == b.id
    for x, y in zip(a.client_ids, b.client_ids, strict=True):
        assert torch.equal(x, y)
    for x, y in zip(a.client_splits, b.client_splits, strict=True):
        assert torch.equal(x, y)
    every = torch.cat(a.client_ids)
    assert len(every) == cora.graph.num_nodes
    assert torch.equal(every.sort().values, torch.arange(cora.graph.num_nodes))


@require("Cora")
def test_metis_parts_are_sorted_balanced_and_refinement_is_an_option(cora):
    default = build_partition(cora, parse_partition("metis"), 8, seed=0)
    quick = build_partition(cora, parse_partition({"name": "metis", "refine_iterations": 1}), 8,
                            seed=0)
    assert default.id != quick.id  # the refinement passes key the artifact
    for artifact in (default, quick):
        sizes = [len(ids) for ids in artifact.client_ids]
        assert max(sizes) <= 1.1 * min(sizes)
        for ids in artifact.client_ids:
            assert torch.equal(ids, ids.sort().values)
        every = torch.cat([*artifact.client_ids, artifact.global_test_ids])
        assert torch.equal(every.sort().values, torch.arange(cora.graph.num_nodes))


@require("Cora")
def test_without_a_global_test_metis_splits_the_whole_graph(cora):
    # the pool is every node: the partition is METIS's split of the graph itself
    artifact = build_partition(cora, parse_partition({"name": "metis", "global_test": 0}), 8,
                               seed=0)
    for ids, part in zip(artifact.client_ids, metis_split(cora.graph, 8, seed=0), strict=True):
        assert torch.equal(ids, part)


def test_metis_reads_each_edge_in_both_directions_once_without_self_loops():
    # one direction only, a self-loop and a repeated edge
    edges = torch.tensor([[0, 1, 2, 2, 3, 3], [1, 2, 0, 2, 1, 1]])
    starts, neighbours = metis_adjacency(edges, 5)
    assert starts.tolist() == [0, 2, 5, 7, 8, 8]  # node 4 has no edge
    assert neighbours.tolist() == [1, 2, 0, 2, 3, 0, 1, 1]
    assert starts.dtype == neighbours.dtype == np.int64  # METIS's index width: no copy


def test_metis_refinement_passes_must_be_positive():
    with pytest.raises(ValidationError, match="refine_iterations"):
        parse_partition({"name": "metis", "refine_iterations": 0})


@require("Cora")
def test_different_seed_gives_a_different_partition(cora):
    options = parse_partition("dirichlet")
    a = build_partition(cora, options, 10, seed=0)
    b = build_partition(cora, options, 10, seed=1)
    assert a.id != b.id
    assert any(len(x) != len(y) or not torch.equal(x, y)
               for x, y in zip(a.client_ids, b.client_ids, strict=True))


@require("Cora")
def test_global_test_is_held_out_from_clients(cora):
    options = parse_partition({"name": "louvain", "global_test": 0.2})
    artifact = build_partition(cora, options, 5, seed=0)
    clients = torch.cat(artifact.client_ids)
    assert len(artifact.global_test_ids) == round(0.2 * cora.graph.num_nodes)
    assert not np.intersect1d(clients.numpy(), artifact.global_test_ids.numpy()).size
    assert len(clients) + len(artifact.global_test_ids) == cora.graph.num_nodes


@require("Cora")
def test_louvain_largest_keeps_the_k_largest_communities(cora):
    from graphfed.data.partition.node import louvain_communities

    artifact = build_partition(cora, parse_partition({"name": "louvain", "mode": "largest"}), 5, 0)
    sizes = [len(ids) for ids in artifact.client_ids]
    expected = [len(c) for c in louvain_communities(cora.graph, seed=0)[:5]]
    assert sorted(sizes, reverse=True) == expected


@require("Cora")
def test_dirichlet_small_alpha_skews_labels_more_than_large_alpha(cora):
    skew = {}
    for alpha in (0.1, 100.0):
        options = parse_partition({"name": "dirichlet", "alpha": alpha})
        artifact = build_partition(cora, options, 10, seed=0)
        skew[alpha] = _label_skew(artifact.client_ids, cora.graph.y, cora.num_classes)
    assert skew[0.1] > 0.4
    assert skew[100.0] < 0.1


@require("Cora")
def test_major_labels_gives_each_client_its_major_share(cora):
    options = parse_partition({"name": "major_labels", "labels": 3, "major_fraction": 0.8,
                               "client_size": 0.05})
    artifact = build_partition(cora, options, 6, seed=0)
    y = cora.graph.y
    every = torch.cat(artifact.client_ids)
    assert len(every.unique()) == len(every)  # disjoint without overlap
    for ids in artifact.client_ids:
        top3 = torch.bincount(y[ids], minlength=7).sort(descending=True).values[:3].sum()
        assert top3 / len(ids) >= 0.8


@require("Cora")
def test_per_client_splits_follow_the_ratios(cora):
    data = materialize(cora, build_partition(cora, parse_partition(
        {"name": "metis", "split": [0.6, 0.2, 0.2]}), 4, seed=0))
    for client in data.clients:
        n = client.graph.num_nodes
        assert abs(client.num_samples("train") - 0.6 * n) <= 1
        assert abs(client.num_samples("val") - 0.2 * n) <= 1
        assert sum(client.num_samples(s) for s in ("train", "val", "test")) == n
        assert torch.equal(client.graph.y, cora.graph.y[client.global_ids])


@require("Cora")
def test_more_clients_than_communities_is_refused(cora):
    with pytest.raises(GraphfedError, match=r"only .* communities"):
        build_partition(cora, parse_partition("louvain"), 1000, seed=0)


@require("PROTEINS")
@pytest.mark.parametrize("spec", ["dirichlet", "uniform"])
def test_graph_partitions_cover_every_graph_once(proteins, spec):
    options = parse_partition({"name": spec, "global_test": 0.1})
    artifact = build_partition(proteins, options, 10, seed=0)
    every = torch.cat([*artifact.client_ids, artifact.global_test_ids])
    assert torch.equal(every.sort().values, torch.arange(len(proteins.graphs)))
    assert len(artifact.global_test_ids) == round(0.1 * len(proteins.graphs))


@require("PROTEINS")
def test_dirichlet_skews_graph_labels(proteins):
    labels = torch.cat([g.y for g in proteins.graphs])
    skew = {}
    for alpha in (0.1, 100.0):
        artifact = build_partition(proteins, parse_partition({"name": "dirichlet", "alpha": alpha,
                                                              "min_size": 5}), 10, seed=0)
        skew[alpha] = _label_skew(artifact.client_ids, labels, 2)
    assert skew[0.1] > 3 * skew[100.0]


def test_flip_edges_keeps_symmetry_and_edge_count():
    rng = np.random.default_rng(0)
    n = 30
    ring = torch.tensor([[i, (i + 1) % n] for i in range(n)]).t()
    edge_index = torch.cat([ring, ring.flip(0)], 1)
    flipped = flip_edges(edge_index, n, 0.5, rng)
    pairs = set(map(tuple, flipped.t().tolist()))
    assert all((v, u) in pairs for u, v in pairs)
    assert flipped.size(1) == edge_index.size(1)
    original = set(map(tuple, edge_index.t().tolist()))
    assert len(pairs - original) == 2 * 15  # 15 undirected edges replaced
    assert all(u != v for u, v in pairs)


@require("PROTEINS")
def test_edge_flip_perturbs_training_graphs_only(proteins):
    options = parse_partition({"name": "uniform", "edge_flip": 0.5})
    data = materialize(proteins, build_partition(proteins, options, 5, seed=0))
    client = data.clients[0]
    for split, changed in (("train", True), ("test", False)):
        for gid, g in zip(client.global_ids[split].tolist(), client.graphs[split], strict=True):
            original = proteins.graphs[gid]
            if original.edge_index.size(1) >= 8:
                same = torch.equal(g.edge_index, original.edge_index)
                assert same != changed


@require("Cora")
def test_artifact_is_reused_for_the_same_parameters(cora, tmp_path, monkeypatch):
    from graphfed.data import load_or_build_partition
    from graphfed.data.federated import artifact_path

    monkeypatch.setenv("GRAPHFED_CACHE", str(tmp_path))
    options = parse_partition("metis")
    first = load_or_build_partition(cora, options, 5, seed=0)
    assert artifact_path(first.id).exists()
    again = load_or_build_partition(cora, options, 5, seed=0)
    assert again.id == first.id and all(
        torch.equal(a, b) for a, b in zip(first.client_ids, again.client_ids, strict=True))
    other = load_or_build_partition(cora, options, 6, seed=0)
    assert other.id != first.id


@require("Cora")
def test_client_stats_account_for_every_edge(cora):
    from graphfed.data.stats import client_stats

    data = materialize(cora, build_partition(cora, parse_partition("metis"), 5, seed=0))
    rows = client_stats(data)
    internal = sum(r["edges"] for r in rows)
    cut = sum(r["lost_edges"] for r in rows) // 2  # a cut edge is lost by both its clients
    assert internal + cut == cora.graph.edge_index.size(1) // 2
    assert all(0.0 <= r["homophily"] <= 1.0 for r in rows)
    assert sum(r["samples"] for r in rows) == cora.graph.num_nodes


@require("PROTEINS")
def test_gcfl_chunking_gives_consecutive_chunks_then_random_graphs(proteins):
    options = parse_partition({"name": "gcfl_chunk", "chunk": 50, "global_test": 0.1})
    artifact = build_partition(proteins, options, 10, seed=123)
    again = build_partition(proteins, options, 10, seed=123)
    assert all(torch.equal(a, b) for a, b in zip(artifact.client_ids, again.client_ids,
                                                 strict=True))
    every = torch.cat([*artifact.client_ids, artifact.global_test_ids])
    assert torch.equal(every.sort().values, torch.arange(len(proteins.graphs)))
    pool = torch.cat(artifact.client_ids).sort().values  # dataset order after the test cut
    for j, ids in enumerate(artifact.client_ids):
        assert torch.equal(ids[:50], pool[50 * j:50 * (j + 1)])
    # TU files are sorted by class: the first chunks are single-class
    labels = torch.cat([g.y for g in proteins.graphs])
    assert labels[artifact.client_ids[0][:50]].unique().numel() == 1


@require("PROTEINS")
def test_gcfl_chunking_refuses_too_many_clients(proteins):
    with pytest.raises(GraphfedError, match="exceeds the"):
        build_partition(proteins, parse_partition("gcfl_chunk"), 30, seed=0)


# Agent 3 of FGFL's code split of 1,113 graphs with seed 123, as the code's own procedure
# (np.random.seed(123) chunking, sklearn train_test_split 0.8/0.2 then 0.5/0.5) draws it.
CODE_AGENT3_TEST = [150, 163, 174, 178, 181, 192, 567, 581, 669, 804, 880, 885, 936]
CODE_AGENT3_VAL = [154, 155, 158, 166, 179, 183, 514, 582, 595, 662, 845, 1063]
CODE_AGENT3_TRAIN_HEAD = [924, 531, 185, 779, 169, 728]


@require("PROTEINS")
def test_gcfl_code_split_replays_the_fgfl_code_and_keeps_validation_out(proteins):
    options = parse_partition("gcfl_code")
    artifact = build_partition(proteins, options, 10, seed=options.seed)
    ids, splits = artifact.client_ids[3], artifact.client_splits[3]
    assert ids[splits == 2].sort().values.tolist() == CODE_AGENT3_TEST
    assert ids[splits == 0][:6].tolist() == CODE_AGENT3_TRAIN_HEAD
    assert len(ids) == 123 - len(CODE_AGENT3_VAL) and not (splits == 1).any()
    # the agents' validation graphs are the global test set: held out, never an agent's
    test = set(artifact.global_test_ids.tolist())
    assert set(CODE_AGENT3_VAL) <= test and len(test) == 111
    every = torch.cat([*artifact.client_ids, artifact.global_test_ids])
    assert torch.equal(every.sort().values, torch.arange(len(proteins.graphs)))
    # the split does not follow the run's seed (the code fixes it for every repeat)
    assert options.seed == 123 and parse_partition({"name": "gcfl_code"}).seed == 123
    with pytest.raises(ValueError, match="validation graphs"):
        parse_partition({"name": "gcfl_code", "global_test": 0.1})


@require("PROTEINS")
def test_gcfl_code_split_flips_only_training_graphs(proteins):
    options = parse_partition({"name": "gcfl_code", "edge_flip": 0.5})
    artifact = build_partition(proteins, options, 10, seed=options.seed)
    for splits, flips in zip(artifact.client_splits, artifact.perturbed_edges, strict=True):
        assert flips and all(splits[position] == 0 for position in flips)


def test_quality_tiers_are_3_3_4_with_ratios_in_their_ranges():
    from graphfed.data.partition.graph import QUALITY_TIERS, quality_tier_flips

    ratios, groups = quality_tier_flips(10, seed=0)
    assert {g: len(m) for g, m in groups.items()} == {"low": 3, "medium": 3, "high": 4}
    assert sorted(c for m in groups.values() for c in m) == list(range(10))
    for group, members in groups.items():
        lo, hi = QUALITY_TIERS[group]
        assert all(lo <= ratios[c] < hi for c in members)
    assert quality_tier_flips(10, seed=0) == (ratios, groups)


@pytest.mark.parametrize("spec", ["metis", "louvain"])
def test_one_pass_client_subgraphs_equal_one_subgraph_per_client(cora, spec):
    """The one-pass construction (disjoint clients) gives each client exactly what PyG's
    ``subgraph`` of its nodes gives: features, labels, splits, edges in the graph's order, and
    the edges it loses; nodes held out for the global test belong to no client."""
    art = build_partition(cora, parse_partition({"name": spec, "global_test": 0.1}), 6, seed=0)
    fast = _node_clients(cora.graph, art.client_ids, art.client_splits)
    for client, ids, splits in zip(fast, art.client_ids, art.client_splits, strict=True):
        slow = _node_client(cora.graph, ids, splits)
        assert client.lost_edges == slow.lost_edges
        assert torch.equal(client.global_ids, slow.global_ids)
        for key in ("x", "y", "edge_index", "train_mask", "val_mask", "test_mask"):
            assert torch.equal(getattr(client.graph, key), getattr(slow.graph, key)), key
    assert sum(c.lost_edges for c in fast) > 0


def test_overlapping_clients_still_get_their_induced_subgraphs(cora):
    ids = [torch.arange(0, 300), torch.arange(200, 500)]  # nodes 200..299 in both
    splits = [torch.zeros(300, dtype=torch.long), torch.ones(300, dtype=torch.long)]
    fast = _node_clients(cora.graph, ids, splits)
    for client, i, s in zip(fast, ids, splits, strict=True):
        slow = _node_client(cora.graph, i, s)
        assert torch.equal(client.graph.edge_index, slow.graph.edge_index)
        assert client.lost_edges == slow.lost_edges
