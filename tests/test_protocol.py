"""The message boundary, aggregation and byte accounting."""

import pytest
import torch

from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.mechanisms.aggregation import weighted_average
from graphfed.messages import (
    COUNT,
    LOSS,
    Message,
    MessageError,
    check_message,
    check_metrics,
    finite_messages,
)
from graphfed.protocol import SERVER_DEVICE
from tests.conftest import require


def test_weighted_average_equals_manual_weighted_sum():
    torch.manual_seed(0)
    params = [{"w": torch.randn(3, 4), "b": torch.randn(4)} for _ in range(3)]
    weights = [10.0, 30.0, 60.0]
    out = weighted_average(params, weights)
    for name in ("w", "b"):
        expected = sum(w / 100.0 * p[name] for w, p in zip(weights, params, strict=True))
        assert torch.allclose(out[name], expected, atol=1e-6)


def test_weighted_average_rejects_bad_weights():
    with pytest.raises(ValueError, match="non-negative"):
        weighted_average([{"w": torch.ones(1)}], [-1.0])


def test_check_message_accepts_a_matching_message():
    m = Message({"w": torch.zeros(2, 3)}, {"num_samples": 5})
    check_message(m, {"w": ((2, 3), torch.float32)}, {"num_samples": COUNT})


@pytest.mark.parametrize(("message", "match"), [
    (Message({"w": torch.tensor([[float("nan"), 0, 0], [0, 0, 0]])}), "NaN"),
    (Message({"w": torch.zeros(3, 2)}), r"\(3, 2\)"),
    (Message({"w": torch.zeros(2, 3, dtype=torch.float64)}), "float64"),
    (Message({"v": torch.zeros(2, 3)}), "unexpected"),
    (Message({"w": torch.zeros(2, 3)}, {"num_samples": float("inf")}), "finite"),
    (Message({"w": [1, 2]}), "not a tensor"),
])
def test_check_message_rejects_malformed_messages(message, match):
    with pytest.raises(MessageError, match=match):
        check_message(message, {"w": ((2, 3), torch.float32)})


DECLARED = {"num_samples": COUNT, "train_loss": LOSS.optional}


@pytest.mark.parametrize(("scalars", "match"), [
    ({"num_samples": 3, "extra": 1.0}, "undeclared scalar 'extra'"),
    ({"train_loss": 0.5}, r"missing scalars \['num_samples'\]"),
    ({"num_samples": 2.5}, "'num_samples' is not an integer"),
    ({"num_samples": -1}, "'num_samples' is outside"),
    ({"num_samples": 3, "train_loss": -1e308}, "'train_loss' is outside"),
    ({"num_samples": 3, "train_loss": 1e300}, "'train_loss' is outside"),  # above float32's
    ({"num_samples": 3, "train_loss": 10**400}, "does not fit a float"),
    ({"num_samples": 3, "train_loss": "low"}, "is a str, not a number"),
    ({"num_samples": 10**5000}, "an integer of 16610 bits"),  # no repr, still one line
])
def test_declared_scalars_are_checked_against_their_ranges(scalars, match):
    check_message(Message(scalars={"num_samples": 3, "train_loss": 0.0}), None, DECLARED)
    with pytest.raises(MessageError, match=match):
        check_message(Message(scalars=scalars), None, DECLARED)


@pytest.mark.parametrize(("tensor", "match"), [
    (torch.zeros(2, 3).to_sparse(), "not a dense one"),
    (torch.zeros(2, 3, device="meta"), "meta tensor"),
    (torch.zeros(2, 3, dtype=torch.complex64), "not real numbers"),
    ((1.0, 2.0), "is a tuple, not a tensor"),
])
def test_only_dense_tensors_of_real_values_cross(tensor, match):
    with pytest.raises(MessageError, match=match):
        check_message(Message({"w": tensor}))
    assert finite_messages({0: Message({"w": tensor})}) == set()  # and nothing is computed


def _metrics(**test) -> dict:
    return {"test": {"acc": 0.5, "loss": 1.0, "macro_f1": 0.4, "n": 10, **test}}


def test_evaluation_metrics_are_declared_and_in_range():
    check_metrics(_metrics(minority_n=4, minority_acc=0.25, micro_f1=0.5), "client 0")
    check_metrics(_metrics(loss=float("nan"), n=0, acc=0.0), "client 0")  # an empty split
    bad = {"acc": _metrics(acc=1e300), "loss": _metrics(loss=float("nan")),
           "minority": _metrics(minority_n=11), "n": _metrics(n=-3),
           "unknown": _metrics(recall=0.5)}
    for why, metrics in bad.items():
        with pytest.raises(MessageError, match="client 0, split test"):
            check_metrics(metrics, "client 0")
        assert why
    for metrics in ([], {"test": [0.5]}, {"train_and_test": _metrics()["test"]},
                    {"test": {"loss": 1.0, "macro_f1": 0.4, "n": 10}}):
        with pytest.raises(MessageError, match="client 0"):
            check_metrics(metrics, "client 0")


def test_the_finite_check_names_the_bad_tensor_and_accepts_sums_that_overflow():
    ok = torch.zeros(3)
    for bad in (torch.tensor([1.0, float("inf")]), torch.tensor([float("inf"), -float("inf")]),
                torch.tensor([float("nan")], dtype=torch.float16)):
        with pytest.raises(MessageError, match="'b' has NaN or infinite"):
            check_message(Message({"a": ok, "b": bad}))
    # finite float64 values whose float64 sum overflows: finite, so accepted
    check_message(Message({"a": ok, "b": torch.full((4,), 1e308, dtype=torch.float64)}))
    check_message(Message({"a": ok, "i": torch.tensor([2**62, 2**62])}))  # integers: no check


def test_many_messages_are_checked_finite_at_once_and_the_bad_ones_named():
    good = Message({"w": torch.ones(3, 2), "b": torch.zeros(2), "n": torch.tensor([2**62])})
    messages = {
        0: good,
        1: Message({"w": torch.ones(3, 2), "b": torch.tensor([0.0, float("nan")])}),
        2: Message({"w": torch.full((3, 2), float("-inf")), "b": torch.zeros(2)}),
        3: Message({"h": torch.full((4096,), 60000.0, dtype=torch.float16)}),  # norm > fp16 max
        4: Message({"e": torch.zeros(0), "d": torch.ones(2, dtype=torch.float64)}),
        5: "not a message",
        6: Message({"w": [1.0]}),
    }
    assert finite_messages(messages) == {0, 3, 4}
    assert finite_messages({}) == set()
    for key in (1, 2):  # what the runtime passes on: the culprit is named
        with pytest.raises(MessageError, match="NaN or infinite"):
            check_message(messages[key], finite=key in finite_messages(messages))


def test_message_bytes_are_tensor_sizes_plus_scalars():
    m = Message({"a": torch.zeros(10, 5), "b": torch.zeros(7, dtype=torch.float64)}, {"n": 3})
    assert m.nbytes == 10 * 5 * 4 + 7 * 8 + 8


def _federation(*overrides):
    """Four Cora clients on the sequential engine, whose ``client.fit`` the tests wrap."""
    config = load_config(None, ["dataset=Cora", "num_clients=4", "partition=metis",
                                "device=cpu", "engine=sequential", *overrides])
    return config, build_federation(config, config.seed)


def _wrap_client_fit(monkeypatch, runtime, behaviour):
    """Replace the client's fit by ``behaviour(honest_fit, message, ctx)``."""
    honest_fit = runtime.client.fit
    monkeypatch.setattr(runtime.client, "fit",
                        lambda message, ctx: behaviour(honest_fit, message, ctx))


@require("Cora")
def test_round_bytes_equal_the_model_size_both_ways():
    _, fed = _federation("client_fraction=0.5")
    param_bytes = sum(p.numel() * p.element_size() for p in fed.trainer.model.parameters())
    record = fed.runtime.fit_round(1)
    assert len(record.sampled) == 2
    assert record.bytes_down == 2 * param_bytes
    assert record.bytes_up == 2 * (param_bytes + 2 * 8)  # + num_samples, train_loss scalars


@require("Cora")
def test_fedavg_server_holds_the_weighted_average_of_replies():
    _, fed = _federation()
    server, runtime = fed.runtime.server, fed.runtime
    messages = server.configure_fit(1, [0, 1, 2, 3])
    replies, _ = runtime.deliver_fit(1, messages)
    server.aggregate_fit(1, replies)
    sizes = [ctx.data.num_samples("train") for ctx in runtime.contexts]
    expected = weighted_average([replies[c].tensors for c in range(4)], sizes)
    for name, value in server.global_params().items():
        assert torch.allclose(value, expected[name])


@require("Cora")
def test_a_server_gets_the_partitions_own_data_only_when_its_registration_asks():
    """FairGFL's ``server_inputs`` hands its server the public pool (prepared on the server's
    device) and the true overlaps; FedAvg's server on the same partition is handed neither."""
    _, fed = _federation("algorithm=fairgfl", "partition=fairgfl_overlap")
    server = fed.runtime.server
    assert server.public.num_samples("train") == fed.data.public.num_nodes > 0
    assert server.public.y.device == SERVER_DEVICE
    assert server.overlap_truth is fed.data.overlap
    _, plain = _federation("partition=fairgfl_overlap")
    assert plain.data.public is not None and not hasattr(plain.runtime.server, "public")


@require("Cora")
def test_the_setup_carries_the_optimizer_the_clients_train_with():
    """q-FedAvg's L defaults to 1 / the clients' rate, APFL's α step to that rate: the
    algorithm's own optimizer rule applied (q-FedAvg's plain SGD), the run's rate kept."""
    _, fed = _federation("algorithm=qfedavg", "optimizer.lr=0.05")
    assert fed.runtime.server.setup.optimizer.name == "sgd"
    assert fed.runtime.server.lipschitz == pytest.approx(1 / 0.05)
    _, fed = _federation("algorithm=apfl", "optimizer.lr=0.02")
    assert fed.runtime.client.alpha_lr() == 0.02


@require("Cora")
def test_a_malformed_reply_is_dropped_and_never_aggregated(monkeypatch):
    _, fed = _federation()
    runtime = fed.runtime

    def poison_client_2(honest_fit, message, ctx):
        reply = honest_fit(message, ctx)
        if ctx.client_id == 2:
            name = next(iter(reply.tensors))
            reply.tensors[name] = torch.full_like(reply.tensors[name], float("nan"))
        return reply

    captured = {}

    def spy(rnd, valid):
        captured.update(valid)
        return type(runtime.server).aggregate_fit(runtime.server, rnd, valid)

    _wrap_client_fit(monkeypatch, runtime, poison_client_2)
    monkeypatch.setattr(runtime.server, "aggregate_fit", spy)
    record = runtime.fit_round(1)
    assert "NaN" in record.dropped[2]
    assert record.answered == [0, 1, 3] and sorted(captured) == [0, 1, 3]
    assert all(torch.isfinite(v).all() for v in runtime.server.global_params().values())


@require("Cora")
def test_clients_never_share_tensors_with_the_server():
    _, fed = _federation()
    server = fed.runtime.server
    before = {k: v.clone() for k, v in server.global_params().items()}
    original = fed.runtime.client.fit

    def vandal(message, ctx):
        for t in message.tensors.values():
            t.add_(1.0)  # a client mutating what it received must not touch the server
        return original(message, ctx)

    fed.runtime.client.fit = vandal
    fed.runtime.deliver_fit(1, server.configure_fit(1, [0]))
    for k, v in server.global_params().items():
        assert torch.equal(v, before[k])


@require("Cora")
def test_a_failing_client_is_dropped_and_the_round_goes_on(monkeypatch):
    from graphfed.runtime.base import RoundFailed

    _, fed = _federation()
    runtime = fed.runtime

    def crash_on_client_1(honest_fit, message, ctx):
        if ctx.client_id == 1:
            raise OSError("disk on fire")
        return honest_fit(message, ctx)

    _wrap_client_fit(monkeypatch, runtime, crash_on_client_1)
    record = runtime.fit_round(1)
    assert record.answered == [0, 2, 3]
    assert record.dropped == {1: "OSError: disk on fire"}

    def crash_always(message, ctx):
        raise OSError("all down")

    monkeypatch.setattr(runtime.client, "fit", crash_always)
    with pytest.raises(RoundFailed, match="no client returned a valid reply"):
        runtime.fit_round(2)
