"""The batched engine's joined layout (graph level, CPU): each client's rows run through its own
parameters, unpadded, with the padded layout's dropout masks bit for bit, so the two layouts
train alike; passes of a few thousand rows add up to one pass."""

from __future__ import annotations

import functools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.models.dropout import keyed_keep, keyed_keep_rows
from graphfed.models.rows import Rows
from graphfed.seeding import call_seed
from graphfed.training import joined as joined_module
from graphfed.training import stacked_losses
from graphfed.training.batched import ClientJob, train_together
from graphfed.training.joined import grouped_linear, joins, stacked_params
from graphfed.training.stacked_losses import client_passes
from graphfed.training.step import LocalStep
from tests.conftest import require

GRAPH = ["dataset=MUTAG", "partition=dirichlet", "num_clients=4", "batch_size=16"]


def _jobs(overrides: list[str]):
    config = load_config(None, [*GRAPH, *overrides, "device=cpu"])
    fed = build_federation(config, 0)
    start = fed.trainer.initial_params()
    # client 1 (13 training graphs) has one batch of 16 to the others' two: it sits the
    # second step of each epoch out, masked
    return fed.trainer, [ClientJob(LocalStep(start), fed.runtime.contexts[c].data,
                                   call_seed(0, 1, c, "fit")) for c in (0, 3, 1)]


def _assert_same(one, other, atol):
    for (a, a_stats), (b, b_stats) in zip(one, other, strict=True):
        for name, value in a.items():
            torch.testing.assert_close(b[name], value, rtol=1e-4, atol=atol)
        assert (a_stats.steps, a_stats.samples) == (b_stats.steps, b_stats.samples)
        assert a_stats.loss == pytest.approx(b_stats.loss, abs=1e-5)


@require("MUTAG")
@pytest.mark.parametrize("model", ["gin", "gcn", "sage", "mlp"])
def test_the_joined_layout_trains_as_the_padded_one_dropout_included(model):
    """Same masks, so only float summation order tells the layouts apart."""
    trainer, jobs = _jobs([f"model={model}", "model.dropout=0.5"])
    padded = train_together(trainer, jobs, 2, 16, joined=False)
    joined = train_together(trainer, jobs, 2, 16, joined=True)
    _assert_same(padded, joined, atol=1e-5)
    assert joined[2][1].steps < joined[0][1].steps  # a client did sit steps out


@require("MUTAG")
def test_a_torch_without_grouped_products_trains_padded_with_the_same_result(monkeypatch):
    """``F.grouped_mm`` is recent: where it is missing the engine keeps to the padded layout
    instead of failing every joined step (and with it every client of the batch)."""
    trainer, jobs = _jobs(["model=gin", "model.dropout=0.5"])
    assert joins(trainer.model, trainer.device)
    joined = train_together(trainer, jobs, 2, 16)
    monkeypatch.delattr(F, "grouped_mm")
    monkeypatch.setattr(joined_module, "grouped_products_run",
                        functools.cache(joined_module.grouped_products_run.__wrapped__))
    assert not joins(trainer.model, trainer.device)
    _assert_same(joined, train_together(trainer, jobs, 2, 16), atol=1e-5)


@require("MUTAG")
def test_passes_of_a_few_rows_add_up_to_one_pass(monkeypatch):
    trainer, jobs = _jobs(["model=gin", "model.dropout=0.5"])
    jobs = [ClientJob(LocalStep(j.step.params, proximal_mu=0.1, anchor=j.step.params),
                      j.data, j.seed) for j in jobs]
    passes = []
    original = stacked_losses.client_passes
    monkeypatch.setattr(stacked_losses, "client_passes",
                        lambda rows, budget: passes.append(original(rows, budget)) or passes[-1])
    monkeypatch.setattr(stacked_losses, "PASS_ROWS", 10**9)
    one = train_together(trainer, jobs, 1, 16, joined=True)
    assert all(len(p) == 1 for p in passes)
    passes.clear()
    monkeypatch.setattr(stacked_losses, "PASS_ROWS", 1)  # a client a pass
    several = train_together(trainer, jobs, 1, 16, joined=True)
    assert max(len(p) for p in passes) == 3
    _assert_same(one, several, atol=1e-6)


@given(st.lists(st.integers(0, 500), max_size=30), st.integers(1, 1000))
def test_client_passes_cover_every_client_once_in_order_near_the_budget(rows, budget):
    passes = client_passes(rows, budget)
    assert [k for a, b in passes for k in range(a, b)] == list(range(len(rows)))
    for number, (a, b) in enumerate(passes):
        assert b > a or not rows
        held = sum(rows[a:b])
        # a pass closes as soon as it holds the budget: all but its last client hold less
        assert sum(rows[a:b - 1]) < budget
        assert held >= budget or number == len(passes) - 1


@pytest.mark.parametrize("width", [7, 64])
def test_a_joined_mask_is_each_clients_own_mask_on_its_rows(width):
    """Odd widths hash element by element, even ones a pair at a time: both give each client
    the rows of its own whole mask, whoever is joined beside it."""
    keys = torch.tensor([5, 9, 2], dtype=torch.int32)
    counts = torch.tensor([4, 0, 11])
    mask = keyed_keep_rows(keys, 3, Rows.of(counts), torch.Size([15, width]), 0.3)
    starts = [0, 4, 4]
    for k in range(3):
        own = keyed_keep(keys[k], 3, torch.Size([20, width]), 0.3)  # padded past its rows
        n = int(counts[k])
        assert torch.equal(mask[starts[k]:starts[k] + n], own[:n])


def test_a_rate_that_rounds_to_the_whole_16_bit_scale_drops_everything():
    """p within 2**-17 of 1 compares the halves with 2**16, past any 16-bit value: no element
    is kept (a signed 16-bit comparison with 2**15 would wrap and keep them all)."""
    rows = Rows.of(torch.tensor([3, 2]))
    keys = torch.tensor([1, 2], dtype=torch.int32)
    assert not keyed_keep_rows(keys, 1, rows, torch.Size([5, 8]), 1 - 2**-18).any()
    assert keyed_keep_rows(keys, 1, rows, torch.Size([5, 8]), 0.5).any()


def test_a_grouped_linear_is_each_clients_own_linear_gradients_included():
    """Unaligned widths (3 in, 5 out: padded for grouped_mm) and a client without rows."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(9, 3, generator=gen, requires_grad=True)
    weight = torch.randn(3, 5, 3, generator=gen, requires_grad=True)
    counts = torch.tensor([4, 0, 5])
    out = grouped_linear(x, weight, Rows.of(counts).ends)
    grad = torch.randn(9, 5, generator=gen)
    out.backward(grad)
    got = x.grad.clone(), weight.grad.clone()
    x.grad = weight.grad = None
    want = torch.cat([F.linear(x[:4], weight[0]), F.linear(x[4:], weight[2])])
    want.backward(grad)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(got[0], x.grad)
    torch.testing.assert_close(got[1], weight.grad)


def test_a_stacked_parameter_used_outside_linear_maps_and_biases_is_refused():
    stacked = torch.randn(2, 4, requires_grad=True)
    bias = stacked_params({"bias": stacked}, {3: Rows.of(torch.tensor([1, 2]))})["bias"]
    x = torch.randn(3, 4)
    spread = x + bias  # a bias: each row gets its own client's
    assert type(spread) is torch.Tensor and bias.shape == (2, 4)  # its shape may be read
    torch.testing.assert_close(spread, x + stacked[torch.tensor([0, 1, 1])])
    spread.sum().backward()  # and the gradient reaches the stack it views
    torch.testing.assert_close(stacked.grad, torch.tensor([[1.0] * 4, [2.0] * 4]))
    with pytest.raises(NotImplementedError, match="mul"):
        torch.mul(x, bias)
