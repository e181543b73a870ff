"""The server trusts no number a client could lie about (issue 53): every reply, fit and
evaluate, passes the boundary check of the round logic all runtimes share (``runtime/base.py``),
and a reply that fails it is dropped and logged while the run goes on. The in-process runtime
stands for all of them here: Flower's only encodes and decodes messages, and hands what it
decoded to the same checks (``test_the_checks_are_the_shared_round_logics``)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import torch

from graphfed.build import attackers
from graphfed.config import load_config
from graphfed.experiment import Federation, build_federation, run_seed
from graphfed.messages import TRAIN_LOSS, Message
from graphfed.runtime.base import Runtime
from graphfed.runtime.simulation import SimulationRuntime
from tests.conftest import require

BASE = ["dataset=Cora", "algorithm=fedavg", "partition=louvain", "num_clients=3", "rounds=2",
        "eval_every=1", "device=cpu", "checkpoint_every=0", "engine=sequential"]


def _federation(*extra: str) -> Federation:
    return build_federation(load_config(None, [*BASE, *extra]), 0)


def _tamper(fed: Federation, phase: str, change: Callable[[int, object], object]) -> None:
    """Client answers of ``phase`` (``fit``, ``evaluate``) as ``change(client, answer)``
    makes them: what a lying or broken client sends."""
    honest = getattr(fed.runtime.client, phase)

    def answer(message, ctx):
        return change(ctx.client_id, honest(message, ctx))

    setattr(fed.runtime.client, phase, answer)


def _delivered(fed: Federation, change: Callable[[dict, list[int]], None]) -> None:
    """Fit replies as ``change(replies, sampled)`` leaves them after delivery: what a transport
    could hand the round logic, whatever the client code would send."""
    runtime = fed.runtime
    deliver = runtime.deliver_fit

    def delivered(rnd, messages):
        replies, failed = deliver(rnd, messages)
        change(replies, sorted(messages))
        return replies, failed

    runtime.deliver_fit = delivered


def _aggregated(fed: Federation) -> list[list[int]]:
    """The clients whose replies each fit round's aggregation received."""
    server, seen = fed.runtime.server, []
    aggregate = server.aggregate_fit

    def spy(rnd, replies):
        seen.append(sorted(replies))
        return aggregate(rnd, replies)

    server.aggregate_fit = spy
    return seen


def _same_params(a: Federation, b: Federation) -> bool:
    ours, theirs = a.runtime.server.global_params(), b.runtime.server.global_params()
    return all(torch.equal(ours[k], theirs[k]) for k in ours)


def _failing(fed: Federation, client: int) -> None:
    """``client``'s fit fails: the reference for a round that aggregates the others only."""
    def crash(who, reply):
        if who == client:
            raise OSError("down")
        return reply

    _tamper(fed, "fit", crash)


# ------------------------------------------------------------------ 1: every reply is checked

@require("Cora")
def test_an_evaluation_missing_a_metric_is_dropped_and_the_run_ends_with_a_summary(tmp_path,
                                                                                 caplog):
    """It used to stop the run with a KeyError in ``evaluation.client_record``."""
    fed = _federation()

    def without_accuracy(client, metrics):
        if client == 1:
            del metrics["test"]["acc"]
        return metrics

    _tamper(fed, "evaluate", without_accuracy)
    summary = run_seed(fed, tmp_path / "seed-0")
    assert (tmp_path / "seed-0" / "summary.json").is_file()
    assert [c["client"] for c in summary["clients"]] == [0, 2]
    assert "missing scalars ['acc']" in fed.runtime.evaluation_dropped[1]
    assert "dropped evaluation of client 1" in caplog.text
    assert 0.0 <= summary["final"]["test_acc"] <= 1.0


def test_the_checks_are_the_shared_round_logics():
    """Each runtime only delivers: the round logic that checks replies is the base class's."""
    runtimes = [SimulationRuntime]
    flower = pytest.importorskip("graphfed.runtime.flower")
    runtimes.append(flower.FlowerRuntime)
    for runtime in runtimes:
        for name in ("_exchange", "setup_round", "fit_round", "evaluate_round"):
            assert getattr(runtime, name) is getattr(Runtime, name), (runtime, name)


# ------------------------------------------------------------------ 2: claimed metrics

@require("Cora")
def test_a_claimed_accuracy_out_of_range_is_dropped_and_the_summary_says_what_is_claimed(
        tmp_path, caplog):
    """An accuracy of 1e300 used to give a final test_acc of 3e299 and a pooled one of inf."""
    fed = _federation()

    def boasting(client, metrics):
        if client == 1:
            metrics["test"]["acc"] = 1e300
        return metrics

    _tamper(fed, "evaluate", boasting)
    summary = run_seed(fed, tmp_path / "seed-0")
    final = summary["final"]
    assert 0.0 <= final["test_acc"] <= 1.0 and 0.0 <= final["test_acc_pooled"] <= 1.0
    assert "client 1, split test: scalar 'acc' is outside [0, 1]" in caplog.text
    assert [c["client"] for c in summary["clients"]] == [0, 2]
    written = json.loads((tmp_path / "seed-0" / "summary.json").read_text())
    claimed = set(written["self_reported"])
    assert {"test_acc", "test_acc_pooled", "test_loss", "val_acc"} <= claimed <= set(final)


@require("Cora")
def test_a_claimed_test_count_is_replaced_by_the_partitions(caplog):
    """A client claiming a million test samples would carry the pooled accuracy; the server
    knows each client's test count from the partition and uses it."""
    honest, liar = _federation(), _federation()

    def inflating(client, metrics):
        if client == 2:
            metrics["test"]["n"] = 10**6
        return metrics

    _tamper(liar, "evaluate", inflating)
    for fed in (honest, liar):
        fed.fit_round(1)
    ours, theirs = honest.evaluate(1), liar.evaluate(1)
    assert theirs["clients"][2]["test_count"] == liar.data.clients[2].num_samples("test")
    assert theirs["test_acc_pooled"] == ours["test_acc_pooled"]
    assert "client 2 claimed 1000000 test samples" in caplog.text


# ------------------------------------------------------------------ 3: claimed fit scalars

@require("Cora")
def test_a_claimed_qfedavg_loss_out_of_range_is_dropped_not_made_the_global_model(caplog):
    """A loss of 1e300 used to give the liar all of q-FedAvg's weight, unlogged."""
    liar, reference = _federation("algorithm=qfedavg"), _federation("algorithm=qfedavg")

    def lying(client, reply):
        if client == 1:
            reply.scalars["qfedavg_loss"] = 1e300
        return reply

    _tamper(liar, "fit", lying)
    _failing(reference, 1)
    record = liar.fit_round(1)
    reference.fit_round(1)
    assert record["answered"] == [0, 2] and "qfedavg_loss" in record["dropped"][1]
    assert "dropped reply of client 1" in caplog.text
    assert _same_params(liar, reference)


@require("Cora")
def test_a_negative_training_loss_is_dropped_not_recorded(caplog):
    fed = _federation()

    def lying(client, reply):
        if client == 0:
            reply.scalars[TRAIN_LOSS] = -1e308
        return reply

    _tamper(fed, "fit", lying)
    record = fed.fit_round(1)
    assert record["answered"] == [1, 2] and "train_loss" in record["dropped"][0]
    assert record["train_loss"] >= 0.0
    assert "dropped reply of client 0" in caplog.text


# ------------------------------------------------------------------ 4: crafted fit replies

def _in_field(make: Callable[[torch.Tensor], object]):
    def change(replies, sampled):
        reply = replies[1]
        name = next(iter(reply.tensors))
        reply.tensors[name] = make(reply.tensors[name])
    return change


def _huge_loss(replies, sampled):
    replies[1].scalars[TRAIN_LOSS] = 10**400


def _copy_from(replies: dict, client: int) -> Message:
    return Message(dict(replies[client].tensors), dict(replies[client].scalars))


def _stranger(replies, sampled):
    replies[99] = _copy_from(replies, sampled[0])


def _not_sampled(replies, sampled):
    (other,) = set(range(3)) - set(sampled)
    replies[other] = _copy_from(replies, sampled[0])


CRAFTED = {
    "a list in a tensor field": (_in_field(lambda t: t.tolist()), "not a tensor"),
    "a meta tensor": (_in_field(lambda t: torch.empty_like(t, device="meta")), "meta"),
    "a sparse tensor": (_in_field(lambda t: t.to_sparse()), "not a dense one"),
    "an integer loss no float holds": (_huge_loss, "does not fit a float"),
    "an unknown client id": (_stranger, None),
    "a client not sampled this round": (_not_sampled, None),
}


@require("Cora")
@pytest.mark.parametrize("craft", list(CRAFTED))
def test_a_crafted_fit_reply_is_dropped_and_the_round_goes_on(craft, caplog):
    change, why = CRAFTED[craft]
    fed = _federation("client_fraction=0.67") if why is None else _federation()
    _delivered(fed, change)
    aggregated = _aggregated(fed)
    record = fed.fit_round(1)
    if why is None:  # a reply from a client the server did not ask: never even checked
        assert aggregated == [record["sampled"]] and record["answered"] == record["sampled"]
        assert "which was not asked this round" in caplog.text
    else:
        assert aggregated == [[0, 2]] and why in record["dropped"][1]
        assert "dropped reply of client 1" in caplog.text
    assert all(torch.isfinite(v).all() for v in fed.runtime.server.global_params().values())


# ------------------------------------------------------------------ 5: huge finite updates

@require("Cora")
@pytest.mark.parametrize("rule", ["mean", "trimmed_mean"])
def test_an_update_scaled_by_1e36_is_dropped_and_the_run_goes_on(rule, tmp_path, caplog):
    """One attacker of four scaling its update by 1e36 used to carry the model to values whose
    next training overflowed: every reply of round 2 was NaN and the run stopped."""
    options = [*BASE, "num_clients=4", f"aggregation.rule={rule}", "attack.kind=scale",
               "attack.scale=1e36"]
    config = load_config(None, [*options, "attack.fraction=0.25"])
    (attacker,) = attackers(config, 0, 4)
    fed = build_federation(config, 0)
    reference = build_federation(load_config(None, options), 0)
    _failing(reference, attacker)
    summary = run_seed(fed, tmp_path / "seed-0")
    lines = [json.loads(x) for x in (tmp_path / "seed-0" / "metrics.jsonl").read_text()
             .splitlines()]
    assert all("update norm" in line["dropped"][str(attacker)] for line in lines)
    assert "aggregation.max_norm_ratio" in caplog.text or "not finite in float32" in caplog.text
    for rnd in (1, 2):
        reference.fit_round(rnd)
    assert _same_params(fed, reference)
    assert 0.0 <= summary["final"]["test_acc"] <= 1.0
