"""q-FedAvg: the server's update against q-FFL's formula computed by hand, more weight on the
higher-loss client as q grows, q = 0 as FedAvg with uniform weights on Cora, the loss a client
reports, the refusal of an impossible one and the SGD local step."""

from __future__ import annotations

import itertools

import pytest
import torch

from graphfed.algorithms.averaging.qfedavg import RECEIVED_LOSS
from graphfed.algorithms.registry import get_algorithm
from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.mechanisms.robust import AggregationOptions
from graphfed.messages import Message, MessageError, check_message
from graphfed.protocol import Setup
from graphfed.training import OptimizerOptions
from tests.conftest import require

CORA = ["dataset=Cora", "partition=metis", "num_clients=3", "rounds=2", "device=cpu"]


def _server(rule="mean", **options):
    algorithm = get_algorithm("qfedavg")
    initial = {"w": torch.tensor([0.5, -1.0, 2.0]), "b": torch.tensor([0.25])}
    setup = Setup(level="node", num_clients=4, num_classes=2, initial_params=initial,
                  options=algorithm.options(**options), optimizer=OptimizerOptions(lr=0.1),
                  aggregation=AggregationOptions(rule=rule))
    return algorithm.server(setup)


def _reply(w, b, loss, size=10):
    return Message({"w": torch.tensor(w), "b": torch.tensor([b])},
                   {"num_samples": size, RECEIVED_LOSS: loss})


REPLIES = {0: _reply([0.4, -0.8, 2.1], 0.2, 0.7, size=10),
           1: _reply([1.0, -1.5, 1.0], 0.5, 2.3, size=30),
           3: _reply([0.5, -1.0, 2.2], 0.3, 0.05, size=5)}


def _by_hand(w, replies, q, lipschitz, weighted):
    """The reference code's loop (fair_flearn qffedavg.py): Delta_k, h_k, w - sum/sum."""
    deltas, hs = [], []
    for m in replies.values():
        f = m.scalars[RECEIVED_LOSS] + 1e-10
        p = m.scalars["num_samples"] if weighted else 1.0
        grad = {k: lipschitz * (w[k].double() - m.tensors[k].double()) for k in w}
        norm = sum(float((g ** 2).sum()) for g in grad.values())
        deltas.append({k: p * f ** q * g for k, g in grad.items()})
        hs.append(p * (q * f ** (q - 1) * norm + lipschitz * f ** q))
    return {k: w[k].double() - sum(d[k] for d in deltas) / sum(hs) for k in w}


@pytest.mark.parametrize(("q", "options", "lipschitz"), [
    (2.0, {}, 10.0), (0.5, {"weighted": True}, 10.0), (1.0, {"lipschitz": 0.3}, 0.3),
    (0.0, {}, 10.0)])
def test_server_update_is_the_q_ffl_formula_computed_by_hand(q, options, lipschitz):
    server = _server(q=q, **options)
    start = {k: v.clone() for k, v in server.params.items()}
    server.aggregate_fit(1, REPLIES)
    expected = _by_hand(start, REPLIES, q, lipschitz, options.get("weighted", False))
    for k in start:
        assert torch.allclose(server.params[k].double(), expected[k], atol=1e-6), k
    assert not torch.allclose(server.params["w"], start["w"])


def test_a_larger_q_moves_the_model_towards_the_higher_loss_client():
    # two clients at equal distance on opposite sides of w; client 1's loss is 4x client 0's
    replies = {0: _reply([1.5, -1.0, 2.0], 0.25, 0.5), 1: _reply([-0.5, -1.0, 2.0], 0.25, 2.0)}
    positions = []
    for q in (0.0, 0.5, 1.0, 2.0, 5.0):
        server = _server(q=q, lipschitz=0.01)
        server.aggregate_fit(1, replies)
        weights = server.round_metrics()["qfedavg_weights"]
        assert weights[0] / weights[1] == pytest.approx(0.25 ** q)
        positions.append(float(server.params["w"][0]) - 0.5)  # >0: towards client 0
    assert positions[0] == pytest.approx(0.0, abs=1e-7)  # q = 0: the plain mean
    assert all(a > b for a, b in itertools.pairwise(positions)), positions
    assert positions[-1] < -0.9  # q = 5: almost client 1's model (-1 from w)


def test_the_server_refuses_a_negative_loss_and_floors_a_zero_one():
    server = _server()
    with pytest.raises(MessageError, match=RECEIVED_LOSS):
        check_message(_reply([0.0, 0.0, 0.0], 0.0, -0.1), *server.reply_spec(0))
    assert RECEIVED_LOSS in server.reply_spec(0)[1]  # a reply without it is malformed
    zero = {0: _reply([1.0, 1.0, 1.0], 0.0, 0.0), 1: _reply([0.0, 0.0, 0.0], 0.0, 1.0)}
    server.aggregate_fit(1, zero)  # F = 0 + 1e-10: a vanishing but finite weight
    assert torch.isfinite(server.params["w"]).all()
    assert server.round_metrics()["qfedavg_weights"][0] == pytest.approx(1e-10)


def test_a_client_lying_about_its_loss_takes_the_mean_but_not_the_median():
    liar = {**REPLIES, 3: _reply([50.0, 50.0, 50.0], 50.0, 1e6)}
    mean, median = _server(lipschitz=0.01), _server(lipschitz=0.01, rule="median")
    mean.aggregate_fit(1, liar)
    median.aggregate_fit(1, liar)
    assert float(mean.params["w"][0]) > 49.0  # its claimed loss buys it the whole mean
    step = median.round_metrics()["qfedavg_step"]
    middle = torch.tensor([1.0, -0.8, 2.1])  # the coordinate-wise median of the three models
    start = torch.tensor([0.5, -1.0, 2.0])
    assert torch.allclose(median.params["w"], start + step * (middle - start))
    assert torch.allclose(median.params["b"], torch.tensor([0.25 + step * (0.5 - 0.25)]))


def _trained(*overrides: str):
    fed = build_federation(load_config(None, [*CORA, *overrides]), 0)
    fed.setup()
    for rnd in (1, 2):
        fed.fit_round(rnd)
    return fed


@require("Cora")
def test_q_zero_is_fedavg_with_uniform_weights_on_cora():
    # SGD at a rate large enough that two rounds move the model far from its start
    common = ["optimizer.name=sgd", "optimizer.lr=0.5"]
    fedavg = _trained("algorithm=fedavg", "fedavg.weighted=false", *common)
    q0 = _trained("algorithm=qfedavg", "qfedavg.q=0", *common)
    q1 = _trained("algorithm=qfedavg", "qfedavg.q=1", *common)
    start = fedavg.runtime.server.setup.initial_params
    mine, theirs, fair = (f.runtime.server.params for f in (q0, fedavg, q1))
    assert q0.runtime.server.round_metrics()["qfedavg_step"] == 1.0
    for k in theirs:
        assert torch.allclose(mine[k], theirs[k], rtol=0, atol=1e-7), k
    assert max(float((theirs[k] - start[k]).abs().max()) for k in start) > 1e-2
    assert max(float((fair[k] - theirs[k]).abs().max()) for k in start) > 1e-4


@require("Cora")
def test_clients_report_the_received_models_training_loss_and_train_with_sgd():
    fed = build_federation(load_config(None, ["algorithm=qfedavg", *CORA,
                                              "optimizer.name=adam"]), 0)
    runtime = fed.runtime
    ctx = runtime.contexts[1]
    assert ctx.trainer.optimizer.name == "sgd"  # Alg. 2's local step, whatever the run's
    sent = runtime.server.params
    fed.fit_round(1)
    reported = runtime.server.round_metrics()["qfedavg_losses"][1]
    before = ctx.trainer.evaluate(sent, ctx.data, ("train",))["train"]["loss"]
    after = ctx.trainer.evaluate(runtime.server.params, ctx.data, ("train",))["train"]["loss"]
    assert reported == before and reported != after
    adam = build_federation(load_config(None, ["algorithm=qfedavg", *CORA, "optimizer.name=adam",
                                               "qfedavg.local_optimizer=run"]), 0)
    assert adam.runtime.contexts[0].trainer.optimizer.name == "adam"
