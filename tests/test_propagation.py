"""GCN's neighbour sum as a sparse product (``models.propagation``) and keyed dropout hashed at
the features' non-zeros: each equals what it replaces, alone and under ``vmap``."""

from __future__ import annotations

import pytest
import torch
from torch import Tensor
from torch.func import vmap
from torch_geometric.nn import GCNConv

from graphfed.data import load_dataset
from graphfed.models import dropout as dropout_module
from graphfed.models.dropout import Positions, dropout, keyed, keyed_keep
from graphfed.models.gnn import GCNLayer, gcn_normalised
from graphfed.models.propagation import weighted_sum
from tests.conftest import require


def _cora():
    return gcn_normalised(load_dataset("Cora").graph)


def _pyg_sum(y, edge_index, weight):
    return GCNConv(1, 1, normalize=False).propagate(edge_index, x=y, edge_weight=weight)


@require("Cora")
@pytest.mark.parametrize("order", ["sorted", "shuffled", "unweighted"])
def test_the_sparse_sum_and_its_gradient_equal_pygs_message_passing(order):
    graph = _cora()
    edge_index, weight = graph.edge_index, graph.edge_weight
    assert bool((edge_index[1][1:] >= edge_index[1][:-1]).all())  # prepare sorts by target
    if order == "shuffled":
        perm = torch.randperm(edge_index.size(1), generator=torch.Generator().manual_seed(0))
        edge_index, weight = edge_index[:, perm], weight[perm]
    if order == "unweighted":
        weight = None
    y = torch.randn(graph.num_nodes, 8, requires_grad=True)
    ours = weighted_sum(y, edge_index, weight)
    theirs = _pyg_sum(y, edge_index, weight)
    assert torch.allclose(ours, theirs, atol=1e-5)
    probe = torch.randn_like(ours)
    (g_ours,) = torch.autograd.grad((ours * probe).sum(), y)
    (g_theirs,) = torch.autograd.grad((theirs * probe).sum(), y)
    assert torch.allclose(g_ours, g_theirs, atol=1e-5)


@require("Cora")
def test_under_vmap_each_client_sums_over_its_own_edges_only():
    graph = _cora()
    clients = 3
    gen = torch.Generator().manual_seed(1)
    # three clients on the same node set, each keeping its own random half of the edges,
    # padded to one length with zero-weight edges into the last node
    keep = [torch.rand(graph.edge_index.size(1), generator=gen) < 0.5 for _ in range(clients)]
    length = max(int(k.sum()) for k in keep)
    edges, weights = [], []
    for k in keep:
        pad = length - int(k.sum())
        edges.append(torch.cat([graph.edge_index[:, k],
                                torch.full((2, pad), graph.num_nodes - 1)], 1))
        weights.append(torch.cat([graph.edge_weight[k], torch.zeros(pad)]))
    y = torch.randn(clients, graph.num_nodes, 4, requires_grad=True)
    stacked = vmap(weighted_sum)(y, torch.stack(edges), torch.stack(weights))
    probe = torch.randn_like(stacked)
    (grad,) = torch.autograd.grad((stacked * probe).sum(), y)
    for c in range(clients):
        y_c = y[c].detach().requires_grad_(True)
        alone = _pyg_sum(y_c, edges[c], weights[c])
        assert torch.allclose(stacked[c], alone, atol=1e-5)
        (grad_c,) = torch.autograd.grad((alone * probe[c]).sum(), y_c)
        assert torch.allclose(grad[c], grad_c, atol=1e-5)


def test_trained_edge_weights_are_refused():
    edge_index = torch.tensor([[0, 1], [1, 0]])
    with pytest.raises(ValueError, match="constants"):
        weighted_sum(torch.ones(2, 1), edge_index, torch.ones(2, requires_grad=True))


def test_the_gcn_layer_keeps_gcnconvs_parameters_and_initialisation():
    torch.manual_seed(3)
    theirs = GCNConv(5, 4, normalize=False)
    torch.manual_seed(3)
    ours = GCNLayer(5, 4)
    assert ours.state_dict().keys() == theirs.state_dict().keys()
    assert all(torch.equal(ours.state_dict()[k], v) for k, v in theirs.state_dict().items())
    x, edge_index = torch.randn(3, 5), torch.tensor([[0, 1, 2, 2], [1, 0, 0, 1]])
    weight = torch.rand(4)
    assert torch.allclose(ours(x, edge_index, weight), theirs(x, edge_index, weight), atol=1e-6)


def test_dropout_hashed_at_the_non_zeros_equals_the_dense_keyed_mask():
    gen = torch.Generator().manual_seed(2)
    clients, shape = 3, (50, 40)
    x = torch.randn(clients, *shape, generator=gen) * (
        torch.rand(clients, *shape, generator=gen) < 0.05)
    x[:, -1, -1] = 0  # a position that holds a zero in every client: the padding's
    positions = [row.reshape(-1).nonzero().view(-1) for row in x]
    width = max(len(p) for p in positions)
    padded = torch.stack([torch.cat([p, torch.full((width - len(p),), x[0].numel() - 1)])
                          for p in positions])
    keys = torch.tensor([11, 12, 13], dtype=torch.int32)

    def drop(key, nonzeros, features):
        with keyed(key, 5, nonzeros):
            return dropout(features, 0.4, True, on_features=True)

    sparse = vmap(drop)(keys, Positions.of(padded), x)
    dense = vmap(lambda k, f: drop(k, None, f))(keys, x)
    assert torch.equal(sparse, dense)
    for c in range(clients):  # and both are the client's own mask, not its neighbours'
        mask = keyed_keep(keys[c], 5 * 1024 + 1, torch.Size(shape), 0.4)
        assert torch.equal(dense[c], x[c] * mask / 0.6)


def test_the_matrices_kept_beside_edge_tensors_go_with_them_and_see_changes():
    import gc

    from graphfed.models.tensor_cache import DERIVED

    y = torch.randn(4, 2, requires_grad=True)
    gc.collect()
    held = len(DERIVED)  # other tests' edge tensors may still live in this process
    for _ in range(20):  # fresh edges every step, as sampled mini-batches have
        edge_index = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 0]])
        weighted_sum(y, edge_index, None).sum().backward()
    assert len(DERIVED) <= held + 1  # only the live one
    del edge_index
    gc.collect()
    assert len(DERIVED) <= held
    edge_index = torch.tensor([[0, 1], [1, 0]])
    assert torch.equal(weighted_sum(y, edge_index, None)[1], y[0])
    edge_index[0, 0] = 2  # changed in place: its matrix is built again
    assert torch.equal(weighted_sum(y, edge_index, None)[1], y[2])


def test_a_batch_that_comes_back_pools_through_the_matrix_built_the_first_time():
    from graphfed.models.propagation import mean_pool, sum_pool
    from graphfed.models.tensor_cache import DERIVED

    x, batch = torch.randn(5, 3), torch.tensor([0, 0, 1, 2, 2])
    first = sum_pool(x, batch, 3)
    (membership,) = (v[2] for v in DERIVED[batch].values())
    (matrix,) = (v[2] for v in DERIVED[membership].values())
    assert torch.equal(sum_pool(x, batch, 3), first)
    assert next(v[2] for v in DERIVED[membership].values()) is matrix  # not built again
    assert torch.allclose(first, torch.stack([x[:2].sum(0), x[2], x[3:].sum(0)]))
    assert torch.allclose(mean_pool(x, batch, 3)[2], x[3:].mean(0))
    batch[3] = 1  # changed in place: its edges are built again
    assert torch.allclose(sum_pool(x, batch, 3)[1], x[2] + x[3])


def test_the_batched_engines_block_diagonal_graph_is_built_once_per_layout():
    from graphfed.models.tensor_cache import DERIVED

    edges = torch.tensor([[[0, 1, 2], [1, 2, 0]], [[1, 2, 2], [0, 0, 1]]])
    y = torch.randn(2, 3, 4, requires_grad=True)
    for _ in range(2):  # two training steps on the same padded layout
        vmap(lambda a, e: weighted_sum(a, e, None))(y, edges).sum().backward()
    (block,) = DERIVED[edges].values()
    flat_edges = block[2][0]
    assert sorted(k[-1] for k in DERIVED[flat_edges]) == [False, True]  # forward, transpose


@pytest.mark.parametrize("p", [0.0, 0.3, 0.5, 0.9])
def test_the_masked_halves_give_the_masks_the_int16_view_gives(p, monkeypatch):
    """A torch whose vmap cannot view int32 as int16 (2.11's) masks and shifts each half out
    instead: the keep bits are the same, per client under vmap and outside it."""
    keys = torch.tensor([7, -3, 2**31 - 1], dtype=torch.int32)
    shape = torch.Size([5, 6])

    def masks() -> tuple[Tensor, Tensor]:
        batched = vmap(lambda k: keyed_keep(k, 11, shape, p))(keys)
        return batched, torch.stack([keyed_keep(k, 11, shape, p, chunk=8) for k in keys])

    by_view = masks()
    monkeypatch.setattr(dropout_module, "vmap_views_dtypes", lambda: False)
    by_halves = masks()
    assert 0 < int(by_view[0].sum()) < by_view[0].numel() or p == 0.0
    for view, halves in zip(by_view, by_halves, strict=True):
        assert torch.equal(view, halves)
