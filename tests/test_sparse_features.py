"""``model.sparse_features``: CSR node features give the dense model's outputs and gradients
(up to float summation order), dropout touches only stored values, whole runs match the dense
ones, and every combination the sparse path cannot serve is refused in one line."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.func import vmap
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.config import load_config
from graphfed.models import ModelOptions, build_model
from graphfed.models import sparse as sparse_module
from graphfed.models.dropout import dropout, keyed
from graphfed.models.sparse import PaddedCsr, is_csr, linear, to_csr, transposed
from tests.conftest import error_line, evaluated_after, require

CORA = ["dataset=Cora", "partition=metis", "num_clients=3", "device=cpu", "model.dropout=0"]


def _logits_and_grads(model, prepared):
    model.zero_grad()
    logits = model(prepared.x, prepared.edge_index, getattr(prepared, "edge_weight", None))
    F.cross_entropy(logits, prepared.y).backward()
    return logits.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}


@pytest.mark.parametrize("name", ["gcn", "gat", "mlp"])
def test_the_sparse_first_layer_gives_the_dense_logits_and_gradients(cora, name):
    graph = cora.graph
    opts = ModelOptions(name=name, dropout=0.0)
    torch.manual_seed(0)
    dense = build_model("node", cora.num_features, cora.num_classes, opts)
    sparse = build_model("node", cora.num_features, cora.num_classes,
                         opts.model_copy(update={"sparse_features": True}))
    sparse.load_state_dict(dense.state_dict())
    prepared = sparse.prepare(graph)
    assert is_csr(prepared.x) and not is_csr(dense.prepare(graph).x)
    assert prepared.x.values().numel() == int((graph.x != 0).sum())
    logits, grads = _logits_and_grads(sparse, prepared)
    want_logits, want_grads = _logits_and_grads(dense, dense.prepare(graph))
    torch.testing.assert_close(logits, want_logits, rtol=1e-4, atol=1e-5)
    for key, grad in want_grads.items():
        torch.testing.assert_close(grads[key], grad, rtol=1e-4, atol=1e-6)


def test_dropout_on_csr_features_drops_and_rescales_stored_values_only(cora):
    x = to_csr(cora.graph.x)
    torch.manual_seed(1)
    out = dropout(x, 0.5, training=True)
    assert is_csr(out)
    assert torch.equal(out.crow_indices(), x.crow_indices())
    assert torch.equal(out.col_indices(), x.col_indices())
    kept = out.values() != 0
    assert torch.allclose(out.values()[kept], 2 * x.values()[kept])
    assert abs(kept.float().mean().item() - 0.5) < 0.02  # 49k stored values
    assert dropout(x, 0.5, training=False) is x


def test_the_csr_linear_of_dropped_features_gives_the_dense_product_and_gradient(cora):
    """Dropout makes a new CSR matrix every step; its transpose (the weight gradient) comes
    from the pattern kept for the features it was made from, with this step's values."""
    x = to_csr(cora.graph.x[:300])
    torch.manual_seed(2)
    dropped = dropout(x, 0.5, training=True)
    weight = torch.randn(16, x.size(1), requires_grad=True)
    for features in (x, dropped):
        out = linear(features, weight)
        (grad,) = torch.autograd.grad(out.square().sum(), weight)
        dense = features.to_dense()
        want = F.linear(dense, weight)
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(grad, torch.autograd.grad(want.square().sum(), weight)[0],
                                   rtol=1e-4, atol=1e-4)
        assert torch.equal(transposed(features).to_dense(), dense.t())


def test_a_received_weight_s_kept_transpose_follows_its_changes_and_a_trained_one_is_not_kept():
    x = to_csr((torch.rand(30, 20) < 0.2).float())
    received = torch.randn(4, 20)
    first = linear(x, received)
    received.mul_(2)  # an in-place change bumps the version: the kept transpose is rebuilt
    torch.testing.assert_close(linear(x, received), 2 * first)
    # fused Adam moves a parameter in place without bumping its version; the product must
    # still see the step (a kept transpose would not)
    trained = torch.nn.Parameter(received.clone())
    optimizer = torch.optim.Adam([trained], lr=0.1, fused=True)
    before = linear(x, trained)
    before.sum().backward()
    optimizer.step()
    with torch.no_grad():
        torch.testing.assert_close(linear(x, trained), F.linear(x.to_dense(), trained))
        assert not torch.allclose(linear(x, trained), before)


def _padded_clients(cora) -> tuple[list[Tensor], PaddedCsr, Tensor]:
    """Three clients' CSR features (120, 80, 150 nodes), their ``PaddedCsr`` and the
    zero-padded dense features ``[3, 151, d]`` the batched engine would otherwise stack."""
    rows = [cora.graph.x[:120], cora.graph.x[300:380], cora.graph.x[500:650]]
    padded = torch.stack([F.pad(r, (0, 0, 0, 151 - len(r))) for r in rows])
    return [to_csr(r) for r in rows], PaddedCsr.stack([to_csr(r) for r in rows], 151), padded


def test_padded_csr_features_give_each_client_its_dense_product_and_gradient(cora, monkeypatch):
    """Under vmap each client multiplies its own features by its own weight (one block-diagonal
    sparse product), or all share one matrix; the block pattern is built once."""
    matrices, padded, dense = _padded_clients(cora)
    builds = []
    block_positions = sparse_module._block_positions
    monkeypatch.setattr(sparse_module, "_block_positions",
                        lambda *a: builds.append(1) or block_positions(*a))
    weight = torch.randn(3, 16, dense.size(2), requires_grad=True)
    bias = torch.randn(3, 16)
    want = torch.baddbmm(bias.unsqueeze(1), dense, weight.transpose(1, 2))
    (want_grad,) = torch.autograd.grad(want.square().sum(), weight)
    for _ in range(2):
        out = vmap(linear)(padded, weight, bias)
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)
        (grad,) = torch.autograd.grad(out.square().sum(), weight)
        torch.testing.assert_close(grad, want_grad, rtol=1e-4, atol=1e-4)
    assert len(builds) == 1
    shared = vmap(linear, in_dims=(None, 0))(PaddedCsr.of(matrices[0]), weight)
    torch.testing.assert_close(shared, torch.matmul(matrices[0].to_dense(),
                                                    weight.transpose(1, 2)),
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(linear(PaddedCsr.of(matrices[1]), weight[0]),
                               F.linear(matrices[1].to_dense(), weight[0]))


def test_keyed_dropout_on_padded_csr_features_draws_the_dense_keyed_mask(cora):
    _, padded, dense = _padded_clients(cora)
    keys = torch.tensor([3, 9, 27], dtype=torch.int32)

    def drop(key, x):
        with keyed(key, 5):
            return dropout(x, 0.5, True, on_features=True)

    got, want = vmap(drop)(keys, padded), vmap(drop)(keys, dense)
    assert torch.equal(got.positions, padded.positions)
    for k in range(3):
        stored = padded.positions[k] >= 0
        scattered = torch.zeros(dense[k].numel()).index_put_(
            (padded.positions[k][stored],), got.values[k][stored])
        assert torch.equal(scattered.view_as(dense[k]), want[k])
    kept = (got.values != 0).sum().item() / (padded.positions >= 0).sum().item()
    assert kept == pytest.approx(0.5, abs=0.03)


def _close_records(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.keys() == b.keys()
        for key, value in b.items():
            if isinstance(value, float):
                assert a[key] == pytest.approx(value, rel=1e-4, abs=1e-5), key
            else:
                assert a[key] == value, key


@require("Cora")
@pytest.mark.parametrize("algorithm", ["fedavg", "fedspray", "fedlit"])
def test_a_federation_on_sparse_features_matches_the_dense_one(algorithm):
    """Two rounds without dropout (dropout draws differ in number between the layouts): the
    same per-client evaluation and, for FedAvg, the same global model."""
    overrides = [f"algorithm={algorithm}", *CORA]
    sparse_runtime, sparse = evaluated_after([*overrides, "model.sparse_features=true"])
    dense_runtime, dense = evaluated_after(overrides)
    assert all(is_csr(ctx.data.x) for ctx in sparse_runtime.contexts)
    _close_records(sparse, dense)
    if algorithm == "fedavg":
        # Adam divides by the root of tiny second moments, so a weight whose gradients are
        # near zero may move a few 1e-6 apart between the two summation orders
        got, want = sparse_runtime.server.global_params(), dense_runtime.server.global_params()
        for key, value in want.items():
            torch.testing.assert_close(got[key], value, rtol=1e-4, atol=2e-5)


@pytest.mark.parametrize("overrides, named", [
    (["model.name=sage"], "first step is linear"),
    (["dataset=PROTEINS", "algorithm=fedavg"], "node-level"),
    (["algorithm=fedstar"], "reads dense features"),
    (["sampling.fanouts=[5,5]", "model.name=gat"], "sampling.fanouts"),
    (["engine=batched", "model.name=gat"], "engine=batched"),
])
def test_what_the_sparse_path_cannot_serve_is_refused_in_one_line(overrides, named):
    result = CliRunner().invoke(app, ["run", "dataset=Cora", "model.sparse_features=true",
                                      *overrides])
    line = error_line(result)
    assert "model.sparse_features" in line and named in line


@pytest.mark.parametrize("overrides, resolved", [
    (["algorithm=fedavg"], True), (["algorithm=fedspray"], True), (["algorithm=fedlit"], True),
    (["algorithm=fedstar"], False), (["model.name=sage"], False),
    (["engine=batched"], True), (["engine=batched", "model.name=gat"], False),
    (["dataset=PROTEINS"], False),
])
def test_auto_takes_sparse_features_wherever_the_run_allows_them(overrides, resolved):
    config = load_config(None, ["dataset=Cora", "model.sparse_features=auto", *overrides])
    assert config.model.sparse_features is resolved
