"""GPFL's per-graph properties (spec gpfl.md §3.4, §7.1.1): the authors' shipped values, the edge
cases the code guards, the paper's entropy form, and the on-disk cache."""

from __future__ import annotations

import math

import pytest
import torch

from graphfed.data import properties
from graphfed.data.properties import dataset_properties, graph_properties
from graphfed.errors import GraphfedError
from tests.conftest import require

# Rows 0, 87 and 989 of property/PROTEINS.pt in Jiachen2cc/Graph-Personalized-Federated-Learning
# (commit d0d002c), the float32 values the authors' code computed: average degree, density,
# degree variance, network entropy, negative scale-free exponent, closeness. Graph 87 has three
# components, graph 989 an isolated node.
AUTHORS_PROTEINS = {
    0: [3.8571429, 0.094076656, 1.3605433, 0.033117559, -2.2592592, 0.19254683],
    87: [4.0526314, 0.10953058, 1.365654, 0.037866216, -2.2467532, 0.16262686],
    989: [3.4000001, 0.17894737, 1.4399996, 0.065608963, -2.2941177, 0.38411757],
}


def undirected(*pairs: tuple[int, int]) -> torch.Tensor:
    edges = torch.tensor(pairs, dtype=torch.long).t().reshape(2, -1)
    return torch.cat([edges, edges.flip(0)], dim=1)


@require("PROTEINS")
@pytest.mark.parametrize("index", sorted(AUTHORS_PROTEINS))
def test_properties_match_the_values_the_authors_ship(proteins, index):
    g = proteins.graphs[index]
    ours = graph_properties(g.edge_index, g.num_nodes)
    # the code's float32 (its degree variance loses ~1e-6 to cancellation)
    assert torch.allclose(ours, torch.tensor(AUTHORS_PROTEINS[index], dtype=torch.float64),
                          rtol=1e-5, atol=0)


def test_a_path_with_an_isolated_node_by_hand():
    # 0-1-2 and node 3 alone: d = (1, 2, 1, 0), E_dir = 4
    ours = graph_properties(undirected((0, 1), (1, 2)), 4).tolist()
    closeness = [2 / 3 * 2 / 3, 1.0 * 2 / 3, 2 / 3 * 2 / 3, 0.0]  # networkx, scaled by (r-1)/(n-1)
    expected = [1.0, 4 / 12, 1.5 - 1.0, 2 * math.log(2) / (4 * 4), -3.0, sum(closeness) / 4]
    assert ours == pytest.approx(expected, rel=1e-12)


def test_graphs_the_code_guards_get_zeros():
    assert graph_properties(torch.empty(2, 0, dtype=torch.long), 5).tolist() == [0.0] * 6
    assert graph_properties(torch.empty(2, 0, dtype=torch.long), 1).tolist() == [0.0] * 6
    one_loop = graph_properties(torch.tensor([[0], [0]]), 1)
    assert one_loop[1] == 0 and one_loop[5] == 0  # density and closeness of one node


def test_paper_entropy_is_the_code_form_times_2n():
    edges = undirected((0, 1), (1, 2), (2, 0), (2, 3))
    code = graph_properties(edges, 5, "code")
    paper = graph_properties(edges, 5, "paper")
    assert paper[3] == pytest.approx(code[3] * 2 * 5)
    assert torch.equal(torch.cat([paper[:3], paper[4:]]), torch.cat([code[:3], code[4:]]))


@require("PROTEINS")
def test_dataset_properties_are_computed_once_then_read_from_the_cache(proteins, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("GRAPHFED_CACHE", str(tmp_path))
    first = dataset_properties(proteins)
    assert first.shape == (len(proteins.graphs), 6)
    index = sorted(AUTHORS_PROTEINS)
    assert torch.allclose(first[index], torch.tensor([AUTHORS_PROTEINS[i] for i in index],
                                                     dtype=torch.float64), rtol=1e-5, atol=0)

    def refuse(*args):
        raise AssertionError("computed again instead of read from the cache")

    monkeypatch.setattr(properties, "graph_properties", refuse)
    assert torch.equal(dataset_properties(proteins), first)
    with pytest.raises(AssertionError, match="computed again"):
        dataset_properties(proteins, "paper")  # a cache of its own
    [cached] = (tmp_path / "properties").glob("*.pt")
    cached.write_bytes(b"not a cache")
    with pytest.raises(GraphfedError, match=r"damaged.*delete it and graphfed computes"):
        dataset_properties(proteins)


@require("PROTEINS")
def test_the_cache_key_follows_the_graphs_structure(proteins):
    graphs = proteins.graphs[:10]
    changed = [*graphs[:9], graphs[9].clone()]
    assert properties.structure_digest(graphs) == properties.structure_digest(changed)
    changed[9].edge_index = changed[9].edge_index[:, 2:]
    assert properties.structure_digest(graphs) != properties.structure_digest(changed)
