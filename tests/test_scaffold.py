"""SCAFFOLD: option II's control update, the corrected gradient, the server's updates of x and c,
the one-client equality with FedAvg, the GPFL code's mode and the bytes of the controls."""

from __future__ import annotations

import pytest
import torch

from graphfed.algorithms.averaging.scaffold import CLIENT_CONTROL, CONTROL, OWN_MODEL, split
from graphfed.algorithms.registry import get_algorithm
from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.mechanisms.control_variates import control_delta
from graphfed.mechanisms.robust import AggregationOptions
from graphfed.mechanisms.updates import with_prefix
from graphfed.messages import Message
from graphfed.protocol import Setup
from graphfed.seeding import seeded_call
from tests.conftest import require

MUTAG = ["dataset=MUTAG", "partition=dirichlet", "model=gin", "model.hidden=16", "device=cpu",
         "batch_size=32"]


def _federation(*overrides: str, clients: int = 3):
    config = load_config(None, ["algorithm=scaffold", *MUTAG, f"num_clients={clients}",
                                "rounds=3", *overrides])
    return build_federation(config, 0)


def test_control_delta_is_option_ii_on_a_hand_made_case():
    x, y = {"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([0.5, 1.0])}
    c = {"w": torch.tensor([0.1, -0.2])}
    # (x - y) / (K lr) - c with K = 5, lr = 0.1: [0.5, 1] / 0.5 - c
    delta = control_delta(x, y, c, steps=5, lr=0.1)
    assert torch.allclose(delta["w"], torch.tensor([0.9, 2.2]))
    # c_i+ = c_i + delta = c_i - c + (x - y) / (K lr)
    c_i = torch.tensor([0.3, 0.3])
    assert torch.allclose(c_i + delta["w"], c_i - c["w"] + (x["w"] - y["w"]) / 0.5)
    assert torch.equal(control_delta(x, y, c, steps=0, lr=0.1)["w"], torch.zeros(2))


def _server(n=4, rule="mean", **options):
    algorithm = get_algorithm("scaffold")
    setup = Setup(level="graph", num_clients=n, num_classes=2,
                  initial_params={"w": torch.zeros(2)}, options=algorithm.options(**options),
                  aggregation=AggregationOptions(rule=rule))
    return algorithm.server(setup)


def _reply(model, delta, size):
    return Message({"w": torch.tensor(model), **with_prefix({"w": torch.tensor(delta)}, CONTROL)},
                   {"num_samples": size})


def test_server_moves_x_by_the_weighted_mean_and_c_by_the_sampled_share():
    server = _server(n=4)
    server.control = {"w": torch.tensor([1.0, 1.0])}
    replies = {0: _reply([1.0, 0.0], [2.0, 0.0], 10), 2: _reply([4.0, 3.0], [-1.0, 3.0], 20)}
    server.aggregate_fit(1, replies)
    assert torch.allclose(server.params["w"], torch.tensor([3.0, 2.0]))  # (10 m0 + 20 m2) / 30
    # c + |S|/N * mean: 2 of 4 clients answered, mean delta = [0, 2]
    assert torch.allclose(server.control["w"], torch.tensor([1.0, 2.0]))
    slow = _server(n=4, global_lr=0.5)
    slow.params = {"w": torch.tensor([1.0, 1.0])}
    slow.aggregate_fit(1, replies)
    assert torch.allclose(slow.params["w"], torch.tensor([2.0, 1.5]))  # x + 0.5 (mean - x)


def test_server_combines_models_and_controls_by_the_aggregation_rule():
    server = _server(n=3, rule="median")
    replies = {c: _reply([float(c), 100.0 * c], [10.0 * c, -float(c)], 10 + c) for c in range(3)}
    replies[2] = _reply([1e6, -1e6], [1e6, 1e6], 1000)  # an outlier, claiming a large size
    server.aggregate_fit(1, replies)
    assert torch.equal(server.params["w"], torch.tensor([1.0, 0.0]))
    assert torch.equal(server.control["w"], torch.tensor([10.0, 0.0]))


def test_options_pick_sgd_unless_the_gpfl_code_mode_or_the_run_optimizer():
    options = get_algorithm("scaffold").options
    assert options().local_optimizer == "sgd"
    assert options(compat_gpfl_code=True).local_optimizer == "run"
    assert options(compat_gpfl_code=True, local_optimizer="sgd").local_optimizer == "sgd"


@require("MUTAG")
@pytest.mark.parametrize(("overrides", "name"), [
    ([], "sgd"), (["scaffold.local_optimizer=run"], "adam"),
    (["scaffold.compat_gpfl_code=true"], "adam")])
def test_clients_train_with_sgd_by_default_and_the_run_optimizer_on_request(overrides, name):
    fed = _federation("optimizer.name=adam", *overrides, clients=2)
    assert fed.runtime.contexts[0].trainer.optimizer.name == name


def _fit(client, message, ctx):
    with seeded_call(0, 1, ctx.client_id, "fit"):
        return client.fit(message, ctx)


@require("MUTAG")
def test_the_correction_is_added_to_the_gradient_and_k_counts_the_steps():
    # full batch, one epoch: one SGD step, so y = x - lr (g + wd x + c - c_i) exactly
    fed = _federation("batch_size=1000", "model.dropout=0", "optimizer.lr=0.1")
    client, ctx = fed.runtime.client, fed.runtime.contexts[0]
    x = {k: v.clone() for k, v in client.setup.initial_params.items()}
    zero = {k: torch.zeros_like(v) for k, v in x.items()}
    plain = _fit(client, Message({**x, **with_prefix(zero, CONTROL)}), ctx)
    torch.manual_seed(1)
    c = {k: 0.01 * torch.randn_like(v) for k, v in x.items()}
    c_i = {k: 0.01 * torch.randn_like(v) for k, v in x.items()}
    ctx.state[CLIENT_CONTROL] = c_i
    corrected = _fit(client, Message({**x, **with_prefix(c, CONTROL)}), ctx)
    y_plain, y = split(plain.tensors)[0], split(corrected.tensors)[0]
    for k in x:
        assert torch.allclose(y[k], y_plain[k] - 0.1 * (c[k] - c_i[k]), atol=1e-6)
    delta = split(corrected.tensors)[1]
    for k in x:  # K = 1 step
        expected = (x[k] - y[k]) / 0.1 - c[k]
        assert torch.allclose(delta[k], expected, atol=1e-5)
        assert torch.allclose(ctx.state[CLIENT_CONTROL][k], c_i[k] + delta[k])


@require("MUTAG")
def test_k_is_the_number_of_local_steps_taken():
    fed = _federation("batch_size=8", "local_epochs=2")
    client, ctx = fed.runtime.client, fed.runtime.contexts[1]
    x = {k: v.clone() for k, v in client.setup.initial_params.items()}
    c = {k: torch.full_like(v, 0.5) for k, v in x.items()}
    y, delta = split(_fit(client, Message({**x, **with_prefix(c, CONTROL)}), ctx).tensors)
    steps = 2 * -(-ctx.data.num_samples("train") // 8)  # epochs x ceil(n / batch)
    lr = ctx.trainer.optimizer.lr
    for k in x:
        assert torch.allclose(delta[k], (x[k] - y[k]) / (steps * lr) - c[k], atol=1e-5)


@require("MUTAG")
def test_one_client_equals_fedavg_with_sgd_in_every_round():
    """With one client c = c_i after every round (both add the same delta to the same value),
    so the correction c - c_i is exactly zero and SCAFFOLD is FedAvg, bit for bit."""
    common = ["optimizer.name=sgd", "optimizer.lr=0.05"]
    scaffold = _federation("algorithm=scaffold", *common, clients=1)
    fedavg = _federation("algorithm=fedavg", *common, clients=1)
    for rnd in (1, 2, 3):
        lines = scaffold.fit_round(rnd), fedavg.fit_round(rnd)
        assert lines[0]["train_loss"] == lines[1]["train_loss"]
        x, reference = scaffold.runtime.server.params, fedavg.runtime.server.params
        assert all(torch.equal(x[k], reference[k]) for k in x)
        c, c_i = scaffold.runtime.server.control, scaffold.runtime.contexts[0].state[CLIENT_CONTROL]
        assert all(torch.equal(c[k], c_i[k]) for k in c)
        assert any(bool(c[k].abs().sum() > 0) for k in c)  # the controls do move
    assert scaffold.evaluate(3)["test_acc"] == fedavg.evaluate(3)["test_acc"]


@require("MUTAG")
def test_controls_double_the_bytes_each_way():
    fed = _federation()
    line = fed.fit_round(1)
    model = sum(v.numel() * v.element_size() for v in fed.runtime.server.params.values())
    assert line["bytes_down"] == 3 * 2 * model
    assert line["bytes_up"] == 3 * (2 * model + 2 * 8)  # + num_samples, train_loss


@require("MUTAG")
def test_gpfl_code_mode_keeps_each_client_on_its_own_model(monkeypatch):
    fed = _federation("scaffold.compat_gpfl_code=true", "optimizer.lr=0.01")
    runtime, client = fed.runtime, fed.runtime.client
    starts: dict[int, dict] = {}
    honest = client.local_train

    def recording(params, ctx, *args, **kwargs):
        starts[ctx.client_id] = {k: v.clone() for k, v in params.items()}
        return honest(params, ctx, *args, **kwargs)

    monkeypatch.setattr(client, "local_train", recording)
    fed.fit_round(1)
    own = {c: dict(ctx.state[OWN_MODEL]) for c, ctx in enumerate(runtime.contexts)}
    x = runtime.server.params
    assert runtime.server.global_params() is None
    assert runtime.server.configure_evaluate(1, [0])[0].tensors == {}
    fed.fit_round(2)
    for c, ctx in enumerate(runtime.contexts):
        assert all(torch.equal(starts[c][k], own[c][k]) for k in x)  # not the server's x
        assert not all(torch.equal(own[c][k], x[k]) for k in x)
        mine = client.evaluate_params(ctx.state[OWN_MODEL], ctx)
        assert client.evaluate(Message(), ctx) == mine


@require("MUTAG")
def test_gpfl_code_mode_corrects_once_per_epoch_and_divides_by_the_epochs():
    fed = _federation("scaffold.compat_gpfl_code=true", "optimizer.persistent=true",
                      "local_epochs=2")
    client, ctx = fed.runtime.client, fed.runtime.contexts[0]
    lr = ctx.trainer.optimizer.lr
    x = {k: v.clone() for k, v in client.setup.initial_params.items()}
    c = {k: torch.full_like(v, 0.3) for k, v in x.items()}
    ctx.state[CLIENT_CONTROL] = {k: torch.full_like(v, 0.1) for k, v in x.items()}
    ctx.state[OWN_MODEL] = {k: v + 0.01 for k, v in x.items()}
    # by hand: an epoch of the client's persistent Adam, W <- W - lr (c - c_i), twice
    expected, memory = ctx.state[OWN_MODEL], {}
    with seeded_call(0, 1, 0, "fit"):
        for _ in range(2):
            expected, _ = ctx.trainer.train(expected, ctx.data, 1, client.setup.batch_size,
                                            memory=memory)
            expected = {k: v - lr * (c[k] - 0.1) for k, v in expected.items()}
    y, delta = split(_fit(client, Message({**x, **with_prefix(c, CONTROL)}), ctx).tensors)
    for k in x:
        assert torch.equal(y[k], expected[k])
        assert torch.equal(ctx.state[OWN_MODEL][k], y[k])
        # K = E = 2 epochs, whatever the number of steps
        assert torch.allclose(delta[k], (x[k] - y[k]) / (2 * lr) - c[k], atol=1e-4)
