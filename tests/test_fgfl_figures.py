"""FGFL's Fig. 1 diagnostic (leave-one-out contributions) and Fig. 4 preset (the lambda sweep)."""

from __future__ import annotations

import json

import pytest
import torch

from graphfed.algorithms.averaging.leave_one_out import RECORD
from graphfed.config import load_config
from graphfed.experiment import build_federation, run_experiment
from graphfed.mechanisms.sparse_rewards import value_weights
from graphfed.mechanisms.updates import add_flat
from graphfed.messages import NUM_SAMPLES
from graphfed.reproduce.papers.fgfl import LAMBDA, LAMBDAS
from graphfed.reproduce.plan import plan_cells
from graphfed.reproduce.runner import reproduce
from tests.conftest import refused_run, require

FIVE_AGENTS = ["dataset=PROTEINS", "model=gin", "partition=uniform", "partition.global_test=0.1",
               "partition.split=[0.9,0.0,0.1]", "num_clients=5", "batch_size=128",
               "optimizer.lr=0.001", "device=cpu"]


def _probed(algorithm: str, *overrides: str):
    """A 5-agent federation with the diagnostic on, after its setup exchange, and the replies
    and starting state its server aggregates each round (recorded as they arrive)."""
    config = load_config(None, [*FIVE_AGENTS, f"algorithm={algorithm}", "rounds=2",
                                f"{algorithm}.leave_one_out=true", *overrides])
    fed = build_federation(config, 0)
    fed.setup()
    server, seen = fed.runtime.server, []
    original = server.aggregate_fit

    def recording(rnd, replies):
        start = {k: v.clone() for k, v in server.params.items()}
        values = server.values.clone() if hasattr(server, "values") else None
        seen.append((dict(replies), start, values, getattr(server, "names", None)))
        original(rnd, replies)

    server.aggregate_fit = recording
    return fed, seen


def _accuracy(fed, params) -> float:
    """The experiment's own global evaluation of ``params`` (not the server's probe)."""
    on_device = {k: v.to(fed.trainer.device) for k, v in params.items()}
    return fed.trainer.evaluate(on_device, fed.global_test, ("test",))["test"]["acc"]


def _fedavg_without(replies, start, values, names, left: int):
    """FedAvg's size-weighted mean of every other agent's model, by hand."""
    rest = [c for c in replies if c != left]
    sizes = torch.tensor([float(replies[c].scalars[NUM_SAMPLES]) for c in rest],
                         dtype=torch.float64)
    return {k: (sum(s * replies[c].tensors[k].double() for s, c in zip(sizes, rest, strict=True))
            / sizes.sum()).to(v.dtype) for k, v in start.items()}


def _fgfl_without(replies, start, values, names, left: int):
    """FGFL's global step without agent ``left``: the round's starting model plus the others'
    updates weighted by ReLU of their starting values, renormalised over them (Eq. 13)."""
    rest = [c for c in sorted(replies) if c != left]
    weights = value_weights(values[rest])
    step = sum(w * replies[c].tensors["update"].double() for w, c in zip(weights, rest,
                                                                          strict=True))
    return add_flat(start, step.float(), names)


@require("PROTEINS")
@pytest.mark.parametrize(("algorithm", "without"), [("fedavg", _fedavg_without),
                                                    ("fgfl", _fgfl_without)])
def test_each_contribution_is_the_hand_computed_leave_one_out(algorithm, without):
    fed, seen = _probed(algorithm)
    for rnd in (1, 2):
        record = fed.fit_round(rnd)["server"][RECORD]
        replies, start, values, names = seen[-1]
        assert record["clients"] == sorted(replies) == [0, 1, 2, 3, 4]
        assert record["acc_all"] == fed.evaluate(rnd)["global_test_acc"]
        by_hand = [_accuracy(fed, without(replies, start, values, names, i)) for i in range(5)]
        assert record["acc_without"] == pytest.approx(by_hand, abs=1e-12)
        assert record["contribution"] == pytest.approx(
            [(record["acc_all"] - w) / w for w in by_hand])


def _lines(run_dir) -> list[dict]:
    """Every seed's metrics.jsonl lines less what differs between identical runs (timings)
    and the diagnostic's own record."""
    out = []
    for path in sorted(run_dir.glob("seed-*/metrics.jsonl")):
        for line in map(json.loads, path.read_text().splitlines()):
            line.pop("train_seconds", None)
            line.pop("eval_seconds", None)
            line.get("server", {}).pop(RECORD, None)
            if line.get("server") == {}:
                del line["server"]
            out.append(line)
    return out


@require("PROTEINS")
@pytest.mark.parametrize("algorithm", ["fedavg", "fgfl"])
def test_the_diagnostic_changes_no_training(tmp_path, algorithm):
    common = [*FIVE_AGENTS, f"algorithm={algorithm}", "rounds=3", "eval_every=1"]
    off = load_config(None, [*common, "name=diagnostic-off"])
    on = load_config(None, [*common, f"{algorithm}.leave_one_out=true", "name=diagnostic-on"])
    off_dir, off_result = run_experiment(off, tmp_path, progress=False)
    on_dir, on_result = run_experiment(on, tmp_path, progress=False)
    assert any(RECORD in line.get("server", {}) for line in map(
        json.loads, (on_dir / "seed-0" / "metrics.jsonl").read_text().splitlines()))
    assert _lines(on_dir) == _lines(off_dir)
    assert on_result["final"]["test_acc"] == off_result["final"]["test_acc"]


@require("PROTEINS")
def test_the_diagnostic_without_a_global_test_set_is_refused_in_one_line(tmp_path):
    line = refused_run(tmp_path, "dataset=PROTEINS", "model=gin", "algorithm=fedavg",
                       "fedavg.leave_one_out=true", "partition=uniform",
                       "partition.global_test=0.0")
    assert "global_test" in line


def test_every_lambda_variant_sets_the_prototype_weight():
    variants = [v for v in LAMBDA.variants if v.algorithm == "fgfl"]
    cells = plan_cells(LAMBDA, variants, ["PROTEINS"], [0], [None], True, "local", ())
    assert [c.config.algorithm_options().proto_weight for c in cells] == list(LAMBDAS)


@require("PROTEINS")
def test_a_two_round_lambda_sweep_has_a_row_per_lambda(tmp_path):
    _, rows, _ = reproduce("fgfl-lambda", seeds=1, quick=True, out=tmp_path / "l",
                           progress=False, overrides=("rounds=2", "eval_every=2"))
    fgfl = [r["method"] for r in rows if r["metric"] == "personalized_acc"
            and r["method"].startswith("fgfl[")]
    assert fgfl == [f"fgfl[lambda={x:g}]" for x in LAMBDAS]
    assert (tmp_path / "l" / "lambda.png").is_file()
