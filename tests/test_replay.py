"""Recorded steps (``training.replay``): on the CPU every replay is emulated, run eagerly and
checked against the recording operation by operation, so these tests prove that what the
batched engine records would replay as the eager rounds do, and that the checks catch a step
a CUDA graph would replay wrongly."""

from __future__ import annotations

import dataclasses
import json
import logging

import pytest
import torch

from graphfed.config import load_config
from graphfed.experiment import build_federation, resume_experiment, run_experiment
from graphfed.training import batched, plans, replay
from graphfed.training.replay import Replay, ReplayError
from tests.conftest import interrupted_run, require


@pytest.fixture
def emulated(monkeypatch):
    monkeypatch.setattr(replay, "CHECK_ON_CPU", True)


def _calls(step: Replay, loads: list) -> list:
    """The step called once per entry of ``loads`` (each a load), its results cloned."""
    return [[t.clone() for t in step(load)] for load in loads]


def test_replays_return_the_eager_results_in_the_recordings_own_tensors(emulated):
    x, weight = torch.zeros(4), torch.arange(4.0)
    step = Replay(lambda: ((x * weight).cumsum(0), x.sum()), torch.device("cpu"))
    values = [torch.full((4,), float(v)) for v in (1, 2, 3, 5)]
    loads = [lambda v=v: x.copy_(v) for v in values]
    got = _calls(step, loads)
    assert step.recorded and step.refused is None
    for v, (cumulative, total) in zip(values, got, strict=True):
        assert torch.equal(cumulative, (v * weight).cumsum(0)) and total == v.sum()
    first, second = step(loads[0]), step(loads[1])
    assert first[0] is second[0]  # the recording's tensors: the next call overwrites them
    assert torch.equal(second[0], (values[1] * weight).cumsum(0))


def test_a_scalar_changed_after_the_recording_is_caught(emulated):
    x, scale = torch.ones(3), [2.0]
    step = Replay(lambda: (x * scale[0],), torch.device("cpu"))
    _calls(step, [lambda: None] * 3)
    scale[0] = 3.0  # a graph would still multiply by 2
    with pytest.raises(ReplayError, match="differs from the recording"):
        step(lambda: None)


def test_an_input_swapped_for_another_tensor_after_the_recording_is_caught(emulated):
    inputs = {"x": torch.ones(3)}
    step = Replay(lambda: (inputs["x"] + 1,), torch.device("cpu"))
    _calls(step, [lambda: None] * 3)
    inputs["x"] = torch.full((3,), 7.0)  # a graph would still read the first tensor's memory
    with pytest.raises(ReplayError, match="differs from the recording"):
        step(lambda: None)


@pytest.mark.parametrize(("run", "why"), [
    (lambda x: (x * x.sum().item(),), "reads a value back to the host"),
    (lambda x: (x + torch.tensor([1.0, 2.0, 3.0]),), "makes a tensor from host data"),
    (lambda x: (x * torch.rand_like(x),), "draws from the global random stream"),
    (lambda x: (x[x > 0],), "depends on the data"),
    (lambda x: (torch.nonzero(x),), "depends on the data"),
], ids=["item", "tensor-from-list", "global-rng", "boolean-mask", "nonzero"])
def test_steps_a_graph_cannot_hold_are_refused_and_keep_running_eagerly(emulated, run, why,
                                                                         caplog):
    x = torch.tensor([1.0, -2.0, 3.0])
    step = Replay(lambda: run(x), torch.device("cpu"))
    with caplog.at_level(logging.WARNING, logger="graphfed.training.replay"):
        for _ in range(3):
            torch.manual_seed(0)
            got = step(lambda: None)
            torch.manual_seed(0)
            assert all(torch.equal(a, b) for a, b in zip(got, run(x), strict=True))
    assert not step.recorded and why in step.refused
    assert sum("runs eagerly" in r.message for r in caplog.records) == 1


def test_gathers_by_integer_index_are_recorded(emulated):
    x, index = torch.arange(5.0), torch.tensor([4, 0, 2])
    step = Replay(lambda: (x[index] * 2,), torch.device("cpu"))
    assert [got for got, in _calls(step, [lambda: None] * 3)][-1].tolist() == [8.0, 0.0, 4.0]
    assert step.recorded and step.refused is None


def test_a_host_tensor_read_by_a_device_step_is_refused():
    """A CUDA step reading a host tensor would record a copy from host memory that a replay
    reads again, whatever that memory holds by then."""
    host = torch.ones(3)
    assert "moves data between the host and the device" in replay._refusal(
        torch.ops.aten.add.Tensor, (host, host), {}, torch.device("cuda"))
    assert replay._refusal(torch.ops.aten.add.Tensor, (host, host), {},
                           torch.device("cpu")) is None


def test_only_cuda_records_unless_the_tests_emulate_it_on_the_cpu(monkeypatch):
    assert replay.available(torch.device("cuda"))
    assert not replay.available(torch.device("cpu"))
    monkeypatch.setattr(replay, "CHECK_ON_CPU", True)
    assert replay.available(torch.device("cpu"))


NODE = ["dataset=Cora", "partition=louvain", "num_clients=4", "local_epochs=2",
        "model.dropout=0.5", "device=cpu", "engine=batched", "checkpoint_every=0"]


def _rounds(overrides: list[str], record: bool, rounds: int = 3, device: str = "cpu"):
    config = load_config(None, [*NODE, *overrides, f"cuda_graphs={record}", f"device={device}"])
    fed = build_federation(config, 0)
    lines = [fed.fit_round(rnd) for rnd in range(1, rounds + 1)]
    params = fed.runtime.server.global_params()
    models = [params] if params is not None else [c.state["params"] for c in fed.runtime.contexts]
    replays = [group[batched.REPLAY_KEY][1].replay for group in fed.runtime._layouts.values()
               if batched.REPLAY_KEY in group]
    return lines, models, replays


@require("Cora")
@pytest.mark.parametrize(("overrides", "gpu_plan"), [
    (["algorithm=fedavg", "model.sparse_features=true"], False),
    (["algorithm=fedavg"], True),
    (["algorithm=fedprox", "fedprox.mu=0.5"], True),
    (["algorithm=scaffold"], False),
    (["algorithm=local", "optimizer.name=sgd", "optimizer.momentum=0.9"], False),
], ids=["fedavg-csr", "fedavg-gpu-plan", "fedprox-gpu-plan", "scaffold", "local-sgd"])
def test_recorded_rounds_replay_the_eager_rounds_bit_for_bit(emulated, monkeypatch, overrides,
                                                            gpu_plan):
    """Three rounds of two full-batch epochs, dropout on: recorded in round 2, replayed (and
    checked) in round 3, every parameter and loss the eager engine's, bit for bit."""
    if gpu_plan:
        monkeypatch.setattr(plans, "for_device", lambda device: plans.ACCELERATOR_PLAN)
    eager_lines, eager_models, none = _rounds(overrides, record=False)
    lines, models, replays = _rounds(overrides, record=True)
    assert none == [] and replays and all(r.recorded and r.refused is None for r in replays)
    assert all(r.calls == 3 for r in replays)
    for want, got in zip(eager_models, models, strict=True):
        assert want.keys() == got.keys()
        assert all(torch.equal(want[n], got[n]) for n in want)
    assert [line["train_loss"] for line in lines] == [line["train_loss"] for line in eager_lines]


@require("Cora")
@pytest.mark.parametrize("overrides", [["batch_size=64"], ["client_fraction=0.5"]],
                         ids=["mini-batch", "changing-clients"])
def test_only_the_same_clients_on_whole_graphs_are_recorded(emulated, overrides):
    """Mini-batches differ from step to step, and a new set of clients is a new layout: both
    train eagerly, with the eager engine's result."""
    eager_lines, eager_models, _ = _rounds(overrides, record=False)
    lines, models, replays = _rounds(overrides, record=True)
    assert not any(r.recorded for r in replays)
    for want, got in zip(eager_models, models, strict=True):
        assert all(torch.equal(want[n], got[n]) for n in want)
    assert [line["train_loss"] for line in lines] == [line["train_loss"] for line in eager_lines]


def _losses(run_dir) -> list[float]:
    lines = (run_dir / "seed-0" / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["train_loss"] for line in lines if '"train_loss"' in line]


@require("Cora")
def test_a_run_resumed_with_recordings_continues_as_the_uninterrupted_one(emulated, tmp_path):
    config = load_config(None, [*NODE, "algorithm=fedavg", "rounds=4", "cuda_graphs=true",
                                "name=run", "checkpoint_every=1"])
    whole, _ = run_experiment(config, tmp_path / "whole", progress=False)
    cut = interrupted_run(config, tmp_path / "cut", at_round=2)
    resumed, _ = resume_experiment(cut, progress=False)
    assert _losses(resumed) == _losses(whole) and len(_losses(whole)) == 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@require("Cora")
@pytest.mark.parametrize("overrides", [
    ["algorithm=fedavg"], ["algorithm=fedavg", "model.sparse_features=true"],
    ["algorithm=fedprox", "fedprox.mu=0.5"], ["algorithm=local", "optimizer.name=sgd"]],
    ids=["fedavg", "fedavg-csr", "fedprox", "local-sgd"])
def test_on_a_gpu_recorded_rounds_are_cuda_graphs_that_train_as_the_eager_rounds(overrides):
    """Recorded in round 2 and replayed in round 3 as real CUDA graphs: the same kernels as the
    eager rounds', so the same parameters up to the order of the atomic additions some
    backward kernels make."""
    eager_lines, eager_models, _ = _rounds(overrides, record=False, device="cuda")
    lines, models, replays = _rounds(overrides, record=True, device="cuda")
    assert replays and [r.refused for r in replays] == [None] * len(replays)
    assert all(r.recorded and r.calls == 3 for r in replays)
    for want, got in zip(eager_models, models, strict=True):
        for name, value in want.items():
            assert (got[name] - value).abs().max() < 1e-5, name
    for want, got in zip(eager_lines, lines, strict=True):
        assert got["train_loss"] == pytest.approx(want["train_loss"], abs=1e-5)


@pytest.mark.parametrize("overrides", [["engine=sequential"],
                                       ["engine=batched", "runtime=flower-sim"]])
def test_recording_without_the_batched_in_process_engine_is_refused_as_bad_config(overrides):
    with pytest.raises(ValueError, match=r"cuda_graphs .* needs engine=batched and "
                                         r"runtime=simulation"):
        load_config(None, ["dataset=Cora", "cuda_graphs=true", *overrides])


@require("Cora")
def test_a_group_holds_one_recording_and_a_new_signature_replaces_it(emulated):
    """Rounds of another length (or rate, or optimizer) are other work: they record anew in
    the group's one slot, so recordings, and the device memory each keeps, never pile up."""
    fed = build_federation(load_config(None, [*NODE, "algorithm=fedavg", "cuda_graphs=true"]),
                           0)
    for rnd in (1, 2):
        fed.fit_round(rnd)
    (group,) = fed.runtime._layouts.values()
    first = group[batched.REPLAY_KEY][1].replay
    assert first.recorded
    fed.runtime.client.setup = dataclasses.replace(fed.runtime.client.setup, local_epochs=1)
    fed.fit_round(3)
    second = group[batched.REPLAY_KEY][1].replay
    assert second is not first and second.calls == 1 and not second.recorded
