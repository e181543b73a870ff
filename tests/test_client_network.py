"""The client-network mechanisms: Gram-based cosines and distances, mixing parameter dicts by a
weight matrix, the Euclidean projection onto the probability simplex."""

import pytest
import torch
import torch.nn.functional as F

from graphfed.mechanisms.client_network import (
    cosine_similarities,
    mix,
    project_to_simplex,
    row_norms,
    squared_distances,
    stack,
)


def _models(k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [{"a.weight": torch.randn(3, 2, generator=g), "b.bias": torch.randn(5, generator=g)}
            for _ in range(k)]


def test_stack_flattens_in_name_order():
    models = _models(2)
    v = stack(models, ["b.bias", "a.weight"])
    assert v.dtype == torch.float64 and v.shape == (2, 11)
    assert torch.equal(v[1, :5], models[1]["b.bias"].double())
    assert torch.equal(v[1, 5:], models[1]["a.weight"].reshape(-1).double())


def test_cosines_distances_and_norms_match_torch():
    v = stack(_models(5))
    expected = F.cosine_similarity(v[:, None, :], v[None, :, :], dim=-1)
    assert torch.allclose(cosine_similarities(v), expected, atol=1e-12)
    assert torch.allclose(squared_distances(v), torch.cdist(v, v) ** 2, atol=1e-10)
    assert squared_distances(v).diagonal().abs().max() == 0
    assert torch.allclose(row_norms(v), v.norm(dim=1), atol=1e-12)
    zero = torch.cat([v[:2], torch.zeros(1, v.shape[1])])
    assert cosine_similarities(zero)[2].abs().max() == 0  # a zero row is like nothing


def test_mix_is_the_weighted_sum_per_parameter():
    models = _models(3)
    w = torch.tensor([[0.2, 0.5, 0.3], [1.0, 0.0, 0.0], [-0.5, 1.0, 0.5]], dtype=torch.float64)
    mixed = mix(models, w)
    for i in range(3):
        for name in models[0]:
            expected = sum(w[i, j] * models[j][name].double() for j in range(3))
            assert mixed[i][name].dtype == torch.float32
            assert mixed[i][name].shape == models[0][name].shape
            assert torch.allclose(mixed[i][name].double(), expected, atol=1e-6)
    assert all(torch.equal(mixed[1][k], models[0][k]) for k in models[0])
    one_row = mix(models, w[:1])
    assert len(one_row) == 1 and torch.equal(one_row[0]["a.weight"], mixed[0]["a.weight"])
    with pytest.raises(ValueError, match="cannot mix"):
        mix(models, torch.eye(2))


def test_simplex_projection_by_hand():
    v = torch.tensor([[0.6, 0.3, -0.5], [0.5, 0.5, 0.5], [2.0, 0.0, 0.0], [0.2, 0.3, 0.5]])
    # row 0: rho = 2, tau = (0.9 - 1)/2 = -0.05
    expected = torch.tensor([[0.65, 0.35, 0.0], [1 / 3, 1 / 3, 1 / 3], [1.0, 0.0, 0.0],
                             [0.2, 0.3, 0.5]], dtype=torch.float64)
    assert torch.allclose(project_to_simplex(v), expected, atol=1e-12)


def test_simplex_projection_is_optimal_on_random_rows():
    """x = P(v) iff <v - x, y - x> <= 0 for every y of the simplex; its vertices suffice."""
    g = torch.Generator().manual_seed(1)
    v = 3 * torch.randn(200, 7, generator=g, dtype=torch.float64)
    x = project_to_simplex(v)
    assert (x >= 0).all() and torch.allclose(x.sum(1), torch.ones(200, dtype=torch.float64))
    vertex_gap = (v - x) - ((v - x) * x).sum(1, keepdim=True)  # <v - x, e_j - x>
    assert vertex_gap.max() <= 1e-12
