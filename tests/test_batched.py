"""The batched engine: clients trained together in one stacked pass give what they give trained
one by one (dropout off), each client's randomness is its own, and what cannot be batched
trains alone."""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from graphfed.config import OptimizerOptions, load_config
from graphfed.experiment import build_federation
from graphfed.models.dropout import Positions, dropout, keyed, keyed_keep, keyed_keep_at
from graphfed.runtime import simulation
from graphfed.seeding import call_seed
from graphfed.tensors import move_tensors
from graphfed.training import batched, plans
from graphfed.training.batched import ClientJob, batch_refusal, train_together
from graphfed.training.grouping import row_macs, size_groups, step_size
from graphfed.training.stacked_optim import StackedOptimizer
from graphfed.training.step import LocalStep
from graphfed.training.trainer import Trainer
from tests.conftest import require

NODE = ["dataset=Cora", "partition=louvain", "num_clients=4"]
FEDGCN = ["dataset=Cora", "partition=major_labels", "partition.overlap=true", "num_clients=4",
          "algorithm=fedgcn"]
GRAPH = ["dataset=MUTAG", "partition=dirichlet", "model=gin", "num_clients=4"]
EDGE = ["dataset=Cora", "partition=louvain", "num_clients=4", "level=edge", "model.hidden=16"]
CASES = {
    "fedavg-node-full-batch-partial": [*NODE, "algorithm=fedavg", "client_fraction=0.5"],
    "fedprox-node-mini-batch": [*NODE, "algorithm=fedprox", "fedprox.mu=0.5",
                                "batch_size=128"],
    "local-node-full-batch": [*NODE, "algorithm=local"],
    # trains on the features its setup exchange aggregated (LocalStep.data), which differ from
    # its local aggregation only where clients share nodes
    "fedgcn-node-full-batch-partial": [*FEDGCN, "client_fraction=0.5"],
    # CSR features: one block-diagonal sparse product for the clients' first layers
    "scaffold-node-sparse-mini-batch": [*NODE, "algorithm=scaffold", "batch_size=128",
                                        "model.sparse_features=true"],
    "fedavg-graph-full-batch": [*GRAPH, "algorithm=fedavg"],
    "fedprox-graph-mini-batch-sgd": [*GRAPH, "algorithm=fedprox", "batch_size=16",
                                     "optimizer.name=sgd", "optimizer.momentum=0.9"],
    "local-graph-mini-batch": [*GRAPH, "algorithm=local", "batch_size=16"],
    # round 2 trains with c - c_i != 0, a gradient offset per client
    "scaffold-graph-mini-batch-partial": [*GRAPH, "algorithm=scaffold", "batch_size=16",
                                          "client_fraction=0.5"],
    # each client's training negatives drawn afresh every epoch, as its sequential fit draws them
    "fedprox-edge-gcn": [*EDGE, "algorithm=fedprox", "fedprox.mu=0.5"],
    "scaffold-edge-sage-hadamard-partial": [*EDGE, "algorithm=scaffold", "model=sage",
                                            "model.decoder=hadamard_mlp", "client_fraction=0.5"],
    "local-edge-mlp": [*EDGE, "algorithm=local", "model=mlp", "model.embedding=8"],
}


def _needs(case: str) -> str:
    """The dataset a case of ``CASES`` runs on."""
    return "MUTAG" if "graph" in case else "Cora"


def _two_rounds(overrides: list[str], engine: str):
    config = load_config(None, [*overrides, "model.dropout=0", "local_epochs=2", "device=cpu",
                                f"engine={engine}"])
    fed = build_federation(config, 0)
    fed.setup()  # FedGCN's exchange: its clients then train on the aggregated features
    lines = [fed.fit_round(rnd) for rnd in (1, 2)]
    return fed, lines, fed.evaluate(2)


def _models(fed) -> list[dict]:
    """The global model, or (Local) every client's own."""
    params = fed.runtime.server.global_params()
    if params is not None:
        return [params]
    return [ctx.state["params"] for ctx in fed.runtime.contexts]


@pytest.mark.parametrize("case", [pytest.param(case, marks=require(_needs(case)), id=case)
                                  for case in CASES])
def test_a_batched_round_equals_the_sequential_one_without_dropout(case, monkeypatch):
    overrides = CASES[case]
    sequential = _two_rounds(overrides, "sequential")
    together: list[int] = []
    monkeypatch.setattr(simulation, "train_together", lambda trainer, jobs, *a, **kw: (
        together.append(len(jobs)), train_together(trainer, jobs, *a, **kw))[1])
    batched = _two_rounds(overrides, "batched")
    assert together == [len(line["sampled"]) for line in batched[1]]  # none trained alone
    for one, other in zip(_models(sequential[0]), _models(batched[0]), strict=True):
        for name in one:
            # Adam divides by sqrt(v): on a weight whose gradients are at rounding level (a
            # feature a client never sees) the summation order alone can move it by ~lr*1e-3,
            # so a handful of entries may differ by more than 1e-5 (one of post.weight's 4,096
            # since MKL's strict reproducible mode changed the sequential path's GEMM
            # blocking); all stay within 1e-4
            diff = (one[name] - other[name]).abs()
            assert diff.max() < 1e-4, (case, name, diff.max())
            assert int((diff > 1e-5).sum()) <= max(3, diff.numel() // 10_000), (case, name)
    for a, b in zip(sequential[1], batched[1], strict=True):
        assert (a["sampled"], a["answered"], a["bytes_up"], a["bytes_down"]) == \
            (b["sampled"], b["answered"], b["bytes_up"], b["bytes_down"])
        assert a["train_loss"] == pytest.approx(b["train_loss"], abs=1e-5)
    for a, b in zip(sequential[2]["clients"], batched[2]["clients"], strict=True):
        score = "test_auc" if "test_auc" in a else "test_acc"
        assert a[score] == pytest.approx(b[score], abs=1e-5)
        assert a["val_loss"] == pytest.approx(b["val_loss"], abs=1e-5)


def _jobs(overrides: list[str], clients: list[int], device: str = "cpu",
          start: dict | None = None):
    """The trainer and fit jobs of ``clients`` on ``device``, from ``start`` (None: the model
    the federation builds)."""
    config = load_config(None, [*overrides, "model.dropout=0.5", f"device={device}"])
    fed = build_federation(config, 0)
    start = fed.trainer.initial_params() if start is None else move_tensors(start, device)
    return fed.trainer, [ClientJob(LocalStep(start), fed.runtime.contexts[c].data,
                                   call_seed(0, 1, c, "fit")) for c in clients]


@pytest.mark.parametrize("overrides", [
    pytest.param(NODE, marks=require("Cora"), id="node"),
    pytest.param([*GRAPH, "batch_size=16"], marks=require("MUTAG"), id="graph-mini-batch"),
    pytest.param(EDGE, marks=require("Cora"), id="edge")])
def test_a_clients_dropout_does_not_depend_on_who_trains_beside_it(overrides):
    trainer, alone = _jobs(overrides, [0])
    _, beside = _jobs(overrides, [0, 3, 1])
    (params_alone, stats_alone), = train_together(trainer, alone, 2, None)
    params_beside, stats_beside = train_together(trainer, beside, 2, None)[0]
    for name, value in params_alone.items():
        assert torch.allclose(value, params_beside[name], atol=1e-6), name
    assert stats_alone.loss == pytest.approx(stats_beside.loss, abs=1e-6)
    again = train_together(trainer, beside, 2, None)[1][0]  # same seed, same draw
    first = train_together(trainer, beside, 2, None)[1][0]
    assert all(torch.equal(again[n], first[n]) for n in again)


@pytest.mark.parametrize("overrides", [
    pytest.param([*NODE, "model.sparse_features=true"], marks=require("Cora"), id="node-csr"),
    pytest.param([*GRAPH, "batch_size=16"], marks=require("MUTAG"), id="graph-mini-batch")])
def test_a_gpus_plan_trains_every_client_as_the_cpus_plan_dropout_included(overrides,
                                                                           monkeypatch):
    """The accelerator plan (padded, one group, whole masks hashed at once), run on the CPU,
    draws the same masks as the CPU's (joined graphs, size groups, chunked hashes): only the
    float summation order differs."""
    trainer, jobs = _jobs(overrides, [0, 3, 1, 2])
    on_cpu = train_together(trainer, jobs, 2, 16)
    layouts = []
    monkeypatch.setattr(plans, "for_device", lambda device: plans.ACCELERATOR_PLAN)
    monkeypatch.setattr(batched, "_train_group", lambda *a, _run=batched._train_group, **kw:
                        layouts.append((len(a[1]), kw.get("joined", False))) or _run(*a, **kw))
    on_gpu = train_together(trainer, jobs, 2, 16)
    assert layouts == [(4, False)]  # one padded group: no joined rows, no size groups
    for (want, want_stats), (got, got_stats) in zip(on_cpu, on_gpu, strict=True):
        for name, value in want.items():  # Adam's rounding-level weights, as above
            diff = (got[name] - value).abs()
            assert diff.max() < 1e-4, (name, diff.max())
            assert int((diff > 1e-5).sum()) <= max(3, diff.numel() // 10_000), name
        assert got_stats.loss == pytest.approx(want_stats.loss, abs=1e-5)
        assert (got_stats.steps, got_stats.samples) == (want_stats.steps, want_stats.samples)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("overrides", [
    pytest.param(NODE, marks=require("Cora"), id="node"),
    pytest.param([*NODE, "model.sparse_features=true"], marks=require("Cora"), id="node-csr"),
    pytest.param([*GRAPH, "batch_size=16"], marks=require("MUTAG"), id="graph-mini-batch"),
    pytest.param(EDGE, marks=require("Cora"), id="edge")])
def test_on_a_gpu_every_client_trains_as_on_the_cpu_dropout_included(overrides):
    """On CUDA (the accelerator's plan) the keyed masks are the CPU's bit for bit, so the
    clients' parameters after two epochs differ by float summation order only."""
    trainer, jobs = _jobs(overrides, [0, 3, 1, 2])
    gpu_trainer, gpu_jobs = _jobs(overrides, [0, 3, 1, 2], "cuda", jobs[0].step.params)
    assert gpu_trainer.device.type == "cuda"
    for (want, want_stats), (got, got_stats) in zip(
            train_together(trainer, jobs, 2, 16), train_together(gpu_trainer, gpu_jobs, 2, 16),
            strict=True):
        for name, value in want.items():  # Adam's rounding-level weights, as above
            diff = (got[name].cpu() - value).abs()
            assert diff.max() < 1e-4, (name, diff.max())
            assert int((diff > 1e-5).sum()) <= max(3, diff.numel() // 10_000), name
        assert got_stats.loss == pytest.approx(want_stats.loss, abs=1e-5)
        assert (got_stats.steps, got_stats.samples) == (want_stats.steps, want_stats.samples)


@require("Cora")
def test_a_row_budget_splits_clients_into_passes_that_train_and_score_alike(monkeypatch):
    """A budget of 600 rows of Cora's 1,433 dense features puts its four Louvain clients
    (about 680 nodes each) in a pass each, for training and for the joined evaluation: the
    same parameters within Adam's rounding, the same metrics."""
    config = load_config(None, [*NODE, "model.dropout=0.5", "device=cpu", "engine=batched",
                                "local_epochs=2"])
    results, train_group = [], batched._train_group
    for budget in (math.inf, 600 * 1433 * 4):
        monkeypatch.setattr(plans, "for_device", lambda device, b=budget: dataclasses.replace(
            plans.CPU_PLAN, group_bytes=b))
        passes: list[int] = []
        monkeypatch.setattr(batched, "_train_group", lambda *a, out=passes, **kw:
                            out.append(len(a[1])) or train_group(*a, **kw))
        fed = build_federation(config, 0)
        fed.fit_round(1)
        results.append((passes, fed.runtime.server.global_params(), fed.evaluate(1)))
    (one_pass, want, want_eval), (four_passes, got, got_eval) = results
    assert (one_pass, four_passes) == ([4], [1, 1, 1, 1])
    for name, value in want.items():
        assert (got[name] - value).abs().max() < 1e-4, name
    for a, b in zip(want_eval["clients"], got_eval["clients"], strict=True):
        assert a["test_acc"] == pytest.approx(b["test_acc"], abs=1e-5)
        assert a["val_loss"] == pytest.approx(b["val_loss"], abs=1e-5)


@require("Cora")
def test_clients_on_sparse_features_train_as_on_dense_ones_dropout_included():
    """The keyed masks of CSR features are the dense ones', so only summation order differs."""
    dense = train_together(*_jobs(NODE, [0, 3, 1]), 2, None)
    sparse = train_together(*_jobs([*NODE, "model.sparse_features=true"], [0, 3, 1]), 2, None)
    for (want, want_stats), (got, got_stats) in zip(dense, sparse, strict=True):
        for name, value in want.items():
            torch.testing.assert_close(got[name], value, rtol=1e-4, atol=1e-5)
        assert got_stats.loss == pytest.approx(want_stats.loss, abs=1e-5)


@given(st.lists(st.floats(0, 1e6), max_size=40), st.sampled_from([0.0, 50.0, math.inf]),
       st.sampled_from([math.inf, 3e6, 1e5]))
def test_size_groups_cover_every_client_once_within_twice_their_smallest(sizes, pass_rows,
                                                                         max_rows):
    groups = size_groups(sizes, 2.0, pass_rows, max_rows)
    assert sorted(k for g in groups for k in g) == list(range(len(sizes)))
    for group in groups:
        assert max(sizes[k] for k in group) <= 2 * min(sizes[k] for k in group)
        # within the row budget, unless one client alone exceeds it
        assert len(group) == 1 or len(group) * max(sizes[k] for k in group) <= max_rows
    tops = [sizes[g[0]] for g in groups]  # largest first, within and across groups
    assert tops == sorted(tops, reverse=True)
    assert all(sizes[g[0]] == max(sizes[k] for k in g) for g in groups)


@given(st.lists(st.floats(0, 1e6), max_size=40))
def test_without_a_cost_per_pass_size_groups_are_as_few_as_the_spread_allows(sizes):
    # the fewest: as many as a greedy pass makes, each group taking every client down to
    # half its largest
    firsts = []
    for size in sorted(sizes, reverse=True):
        if not firsts or size * 2 < firsts[-1]:
            firsts.append(size)
    assert len(size_groups(sizes, 2.0)) == len(firsts)


def _grouping_cost(sizes, groups, pass_rows):
    return sum(pass_rows + len(g) * max(sizes[k] for k in g) for g in groups)


@given(st.lists(st.integers(0, 60), max_size=9), st.sampled_from([0.0, 30.0, 400.0, 5000.0]))
def test_size_groups_cost_the_least_padding_and_passes_of_any_runs(exponents, pass_rows):
    # sizes at least 1% apart (or equal), where runs of similar sizes are exact; every
    # partition of the sorted sizes into runs within the spread, tried by brute force
    sizes = [float(round(100 * 1.05 ** e)) for e in exponents]
    got = _grouping_cost(sizes, size_groups(sizes, 4.0, pass_rows), pass_rows)
    order = sorted(range(len(sizes)), key=lambda k: -sizes[k])
    best = math.inf
    for cuts in itertools.product([False, True], repeat=max(len(order) - 1, 0)):
        groups, current = [], [order[0]] if order else []
        for k, cut in zip(order[1:], cuts, strict=True):
            if cut:
                groups.append(current)
                current = []
            current.append(k)
        groups += [current] if current else []
        if all(max(sizes[k] for k in g) <= 4 * min(sizes[k] for k in g) for g in groups):
            best = min(best, _grouping_cost(sizes, groups, pass_rows))
    assert got == pytest.approx(best if order else 0.0)


@require("MUTAG")
def test_clients_of_very_different_sizes_train_in_separate_stacks(monkeypatch):
    trainer, jobs = _jobs(GRAPH, [0, 1, 2, 3])
    sizes = [step_size(j.data, None) for j in jobs]
    plan = plans.CPU_PLAN
    groups = size_groups(sizes, plan.size_spread,
                         plan.pass_macs / row_macs(trainer.model, jobs[0].data.splits["train"].x))
    # MUTAG's Dirichlet clients differ enough (fedavg-graph-full-batch above trains them so)
    assert len(groups) > 1, sizes
    stacked = []
    monkeypatch.setattr(batched, "_train_group", lambda trainer, group, *a, **kw: stacked.append(
        ([id(j) for j in group], kw.get("joined", False))) or [(j.step.params, None)
                                                              for j in group])
    results = train_together(trainer, jobs, 1, None, joined=False)  # the padded layout
    assert stacked == [([id(jobs[k]) for k in g], False) for g in groups]
    assert all(r[0] is j.step.params for r, j in zip(results, jobs, strict=True))
    # on the CPU a GIN's graph-level clients are joined, unpadded: one stack for all
    stacked.clear()
    train_together(trainer, jobs, 1, None)
    assert stacked == [([id(j) for j in jobs], True)]


@require("Cora")
def test_the_cpu_pads_cheap_rows_but_splits_off_a_large_client_with_dense_features():
    """Cora's ten Louvain clients: nine of 257-259 nodes and one of 388. On 1,433 dense
    features padding the nine to 388 rows costs more than a second pass; on CSR features
    (1.3% non-zero) a row is cheap and one pass is cheaper."""
    louvain = ["dataset=Cora", "partition=louvain", "num_clients=10"]
    plan = plans.CPU_PLAN
    for overrides, count in ((louvain, 2), ([*louvain, "model.sparse_features=true"], 1)):
        trainer, jobs = _jobs(overrides, list(range(10)))
        sizes = [step_size(j.data, None) for j in jobs]
        assert sorted(sizes)[-2:] == [259, 388], sizes
        pass_rows = plan.pass_macs / row_macs(trainer.model, jobs[0].data.x)
        assert len(size_groups(sizes, plan.size_spread, pass_rows)) == count, pass_rows


def test_keyed_masks_keep_the_rate_and_differ_between_keys_and_calls():
    shape = torch.Size([400, 250])
    one = keyed_keep(torch.tensor(7, dtype=torch.int32), 1, shape, 0.3)
    assert one.float().mean().item() == pytest.approx(0.7, abs=0.01)
    assert torch.equal(one, keyed_keep(torch.tensor(7, dtype=torch.int32), 1, shape, 0.3))
    for other in (keyed_keep(torch.tensor(8, dtype=torch.int32), 1, shape, 0.3),
                  keyed_keep(torch.tensor(7, dtype=torch.int32), 2, shape, 0.3)):
        # independent masks agree where both keep or both drop: 0.7^2 + 0.3^2
        assert (one == other).float().mean().item() == pytest.approx(0.58, abs=0.01)
    # one hash serves two neighbours: their bits are independent all the same
    assert (one.flatten()[0::2] == one.flatten()[1::2]).float().mean().item() == pytest.approx(
        0.58, abs=0.01)


def test_keyed_bits_at_given_positions_are_those_of_the_whole_mask():
    """``keyed_keep_at`` (sparse features: the non-zeros' positions only) gives each position the
    bit the whole mask gives it, at odd and even positions and past an odd length."""
    key, shape = torch.tensor(11, dtype=torch.int32), torch.Size([37, 29])
    whole = keyed_keep(key, 3, shape, 0.4).flatten()
    positions = torch.randperm(shape.numel(), generator=torch.Generator().manual_seed(0))[:500]
    assert torch.equal(keyed_keep_at(key, 3, Positions.of(positions), 0.4), whole[positions])


def test_keyed_masks_do_not_depend_on_the_cached_counters(monkeypatch):
    """The hash counters come from a cache a device, grown on demand and capped: masks within,
    beyond and past the cap are the masks counted afresh, while and after the cache grows."""
    from graphfed.models import dropout as module

    key = torch.tensor(5, dtype=torch.int32)
    shapes = [torch.Size([9, 7]), torch.Size([10, 8]), torch.Size([30, 40])]  # 32, 40, 600 pairs
    monkeypatch.setattr(module, "_COUNTERS", {})
    monkeypatch.setattr(module, "CACHED_COUNTERS", 0)  # nothing cached: counted afresh
    fresh = [keyed_keep(key, 2, shape, 0.5) for shape in shapes]
    assert not module._COUNTERS
    monkeypatch.setattr(module, "CACHED_COUNTERS", 100)
    for _ in range(2):  # the first pass grows the cache, the second reads it
        for shape, mask in zip(shapes, fresh, strict=True):
            assert torch.equal(keyed_keep(key, 2, shape, 0.5), mask)
    assert module._COUNTERS[torch.device("cpu")].numel() == 64  # 32 pairs, doubled for 40


@pytest.mark.parametrize("chunk", [None, 1024, 1000])
def test_keyed_dropout_hashed_in_chunks_is_each_clients_whole_mask(chunk):
    # chunks of 1,024 and 1,000 elements: 3 chunks of this 2,500-element tensor, the last one
    # short; None: the whole mask at once
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 50, 50, generator=gen)
    keys = torch.tensor([4, 5, 6], dtype=torch.int32)

    def drop(key, features):
        with keyed(key, 2, chunk=chunk):
            return dropout(features, 0.25, True)

    out = torch.vmap(drop)(keys, x)
    for c in range(3):
        mask = keyed_keep(keys[c], 2 * 1024 + 1, torch.Size([50, 50]), 0.25)
        assert torch.equal(out[c], x[c] * mask / 0.75)


@pytest.mark.parametrize("options", [
    OptimizerOptions(name="adam", lr=0.05, weight_decay=0.01),
    OptimizerOptions(name="sgd", lr=0.1, weight_decay=0.01, momentum=0.9),
    OptimizerOptions(name="sgd", lr=0.1, weight_decay=0.0)], ids=["adam", "sgd-momentum", "sgd"])
def test_a_stacked_step_is_each_clients_own_torch_step_and_a_masked_client_waits(options):
    gen = torch.Generator().manual_seed(0)
    start = torch.randn(3, 4, 5, generator=gen)
    grads = torch.randn(8, 3, 4, 5, generator=gen)
    # None: every client steps (torch's own update while no client has missed a step)
    active = [None, None, *torch.tensor([[1, 1, 1], [1, 0, 1], [0, 0, 1], [1, 1, 0],
                                         [1, 1, 1], [0, 1, 1]], dtype=torch.bool)]
    stacked = {"w": start.clone().requires_grad_(True)}
    optimizer = StackedOptimizer(options, stacked, 3)
    for grad, on in zip(grads, active, strict=True):
        stacked["w"].grad = grad.clone()
        optimizer.step(on)
    for k in range(3):  # each client alone, with the optimizer the sequential trainer builds
        w = start[k].clone().requires_grad_(True)
        alone = Trainer(torch.nn.Linear(1, 1), options, 2).make_optimizer([w])
        for grad, on in zip(grads, active, strict=True):
            if on is None or on[k]:
                w.grad = grad[k].clone()
                alone.step()
        assert torch.allclose(stacked["w"][k], w, atol=1e-6), k


@require("Cora")
def test_fedgcn_clients_train_together_on_their_aggregated_features(monkeypatch):
    """The equality above would also hold if FedGCN's clients fell back to training alone:
    here every one is in the batch, with the features its exchange built, and the layout
    built in round 1 is the one round 2 finds."""
    config = load_config(None, [*FEDGCN, "engine=batched", "device=cpu"])
    fed = build_federation(config, 0)
    fed.setup()
    seen = []
    monkeypatch.setattr(simulation, "train_together", lambda trainer, jobs, *a, **kw: (
        seen.append(jobs), train_together(trainer, jobs, *a, **kw))[1])
    for rnd in (1, 2):
        fed.fit_round(rnd)
    contexts = fed.runtime.contexts
    for jobs in seen:
        for job, ctx in zip(jobs, contexts, strict=True):
            assert job.data.x is ctx.state["fedgcn_features"]
            assert not torch.equal(job.data.x, ctx.data.x)
    assert len(seen) == 2 and [id(j.data) for j in seen[0]] == [id(j.data) for j in seen[1]]


@require("Cora")
def test_clients_the_engine_cannot_batch_train_alone_with_the_same_result():
    adaptive = [*NODE, "algorithm=fedprox", "fedprox.adaptive=true"]
    sequential = _two_rounds(adaptive, "sequential")
    batched = _two_rounds(adaptive, "batched")
    for name, value in _models(sequential[0])[0].items():
        assert torch.equal(value, _models(batched[0])[0][name])
    trainer, jobs = _jobs([*NODE, "optimizer.persistent=true"], [0])
    assert "persists" in batch_refusal(trainer, jobs[0].data)
    trainer, jobs = _jobs([*NODE, "sampling.fanouts=[5,5]", "model=sage"], [0])
    assert "sampled" in batch_refusal(trainer, jobs[0].data)
    trainer, jobs = _jobs([*EDGE, "model=gat"], [0])  # whatever its dropout
    assert "boolean mask" in batch_refusal(trainer, jobs[0].data)


def test_an_edge_level_run_takes_the_batched_engine_where_the_node_level_would():
    for model, engine in (("gcn", "batched"), ("sage", "batched"), ("gat", "sequential")):
        config = load_config(None, [*EDGE, "algorithm=fedprox", f"model={model}"])
        assert config.engine == engine, model


@require("Cora")
def test_edge_clients_draw_their_negatives_leaving_the_callers_random_streams():
    """Each edge client's negatives come from the global streams seeded with its call seed
    (as its sequential fit draws them); the caller's streams are given back as they were."""
    trainer, jobs = _jobs(EDGE, [0, 2])
    random.seed(1)
    torch.manual_seed(1)
    before = random.getstate(), torch.get_rng_state()
    first = train_together(trainer, jobs, 2, None)
    assert random.getstate() == before[0] and torch.equal(torch.get_rng_state(), before[1])
    again = train_together(trainer, jobs, 2, None)
    for (want, want_stats), (got, got_stats) in zip(first, again, strict=True):
        assert all(torch.equal(want[n], got[n]) for n in want)
        assert (got_stats.loss, got_stats.samples) == (want_stats.loss, want_stats.samples)


NODE_GLOBAL = ["dataset=Cora", "partition=dirichlet", "partition.global_test=0.2",
               "client_global_eval=true", "num_clients=4", "eval_train_split=true"]
GRAPH_GLOBAL = [*GRAPH, "partition.global_test=0.2", "client_global_eval=true",
                "eval_train_split=true"]
# Local's clients deploy models of their own (a padded, vmapped pass), FedAvg's one global
# model (their graphs joined into one)
EVAL_CASES = {f"{algorithm}-{level}": [*base, f"algorithm={algorithm}"]
              for algorithm in ("local", "fedavg")
              for level, base in (("node", NODE_GLOBAL), ("graph", GRAPH_GLOBAL),
                                  ("node-sparse", [*NODE_GLOBAL, "model.sparse_features=true"]))}
# personalised graph-level clients padded and vmapped, as on a GPU (on the CPU: plain passes)
EVAL_CASES["local-graph-accelerator"] = EVAL_CASES["local-graph"]


@pytest.mark.parametrize("case", [
    pytest.param(case, marks=require("Cora" if "node" in case else "MUTAG"), id=case)
    for case in EVAL_CASES])
def test_clients_evaluated_together_score_what_they_score_one_by_one(case, monkeypatch):
    if case.endswith("-accelerator"):
        monkeypatch.setattr(plans, "for_device", lambda device: plans.ACCELERATOR_PLAN)
    overrides = [*EVAL_CASES[case], "model.dropout=0.5", "local_epochs=1", "device=cpu"]
    feds = {engine: build_federation(load_config(None, [*overrides, f"engine={engine}"]), 0)
            for engine in ("sequential", "batched")}
    fed = feds["sequential"]
    fed.fit_round(1)
    batched = feds["batched"]
    batched.runtime.load_state_dict(fed.runtime.state_dict())  # the same models in both
    batched.runtime.server.load_state_dict(fed.runtime.server.state_dict())
    together, alone = batched.runtime._evaluations(
        batched.runtime.server.configure_evaluate(1, list(range(4))))
    assert sorted(together) == [0, 1, 2, 3] and not alone  # all scored in one pass
    results = {engine: f.runtime.evaluate_round(1) for engine, f in feds.items()}
    assert sorted(results["sequential"]) == sorted(results["batched"])
    # a second evaluation, through the layouts and rows the first one kept, scores the same
    assert batched.runtime.evaluate_round(1) == results["batched"]
    keys = ("acc", "loss", "macro_f1", "n", "minority_n", "minority_acc")
    for client, metrics in results["sequential"].items():
        assert set(metrics) == set(results["batched"][client]) >= {"val", "test", "train",
                                                                   "global"}
        for split, m in metrics.items():
            other = results["batched"][client][split]
            assert {k for k in keys if k in m} == {k for k in keys if k in other}
            for key in (k for k in keys if k in m):
                assert m[key] == pytest.approx(other[key], abs=1e-5), (client, split, key)


@require("Cora")
def test_joined_evaluation_scores_rows_built_once_and_skips_an_empty_split():
    from graphfed.training.batched_eval import EvalJob, evaluate_together
    trainer, fits = _jobs([*NODE, "eval_train_split=true"], [0, 1, 2])
    fits[1].data.index["val"] = fits[1].data.index["val"][:0]  # a client without val nodes
    params = trainer.initial_params()
    jobs = [EvalJob(params, f.data, None) for f in fits]
    cache: dict = {}
    first = evaluate_together(trainer, jobs, cache)
    (built,) = cache["joined"][0].values()
    second = evaluate_together(trainer, jobs, cache)
    assert next(iter(cache["joined"][0].values())) is built  # the rows were not rebuilt
    assert second == first
    alone = [trainer.evaluate(params, f.data) for f in fits]
    assert [sorted(m) for m in first] == [sorted(m) for m in alone]
    assert "val" not in first[1] and {"val", "test", "train"} <= set(first[0])
    for together, one in zip(first, alone, strict=True):
        for split, m in one.items():
            for key, value in m.items():
                assert together[split][key] == pytest.approx(value, abs=1e-5), (split, key)


@require("Cora")
def test_evaluation_the_engine_cannot_stack_runs_one_by_one():
    from graphfed.training.batched_eval import eval_refusal
    trainer, jobs = _jobs([*NODE, "sampling.fanouts=[5,5]", "model=sage",
                           "sampling.evaluate=sampled"], [0])
    assert "sampled" in eval_refusal(trainer, jobs[0].data)
    # FedGCN evaluates on features its exchange built: it keeps its own evaluate
    fed = build_federation(load_config(None, [*NODE, "algorithm=fedgcn", "device=cpu",
                                              "engine=batched"]), 0)
    together, alone = fed.runtime._evaluations(
        fed.runtime.server.configure_evaluate(1, [0, 1]))
    assert not together and sorted(alone) == [0, 1]
