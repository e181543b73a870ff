"""Ditto: with λ = 0 each personal model is Local's to the bit while the server holds FedAvg's
model; a larger λ pulls the personal model towards the global model it was sent; with a
persistent optimizer the two models keep separate states."""

import torch
from typer.testing import CliRunner

from graphfed.algorithms.personalized.ditto import GLOBAL_MEMORY
from graphfed.cli import app
from graphfed.config import load_config
from graphfed.experiment import build_federation
from tests.conftest import error_line, evaluated_after, require

CORA = ["dataset=Cora", "partition=metis", "num_clients=3", "device=cpu", "engine=sequential"]


def _same(a, b):
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


@require("Cora")
def test_lambda_zero_personal_models_are_local_and_the_server_is_fedavg():
    runtime, records = evaluated_after(["algorithm=ditto", "ditto.lam=0", *CORA])
    local, local_records = evaluated_after(["algorithm=local", *CORA])
    fedavg, _ = evaluated_after(["algorithm=fedavg", *CORA])
    assert [{k: v for k, v in r.items() if k != "train_loss"} for r in records] == \
        [{k: v for k, v in r.items() if k != "train_loss"} for r in local_records]
    for ctx, alone in zip(runtime.contexts, local.contexts, strict=True):
        assert _same(ctx.state["params"], alone.state["params"])
    assert _same(runtime.server.global_params(), fedavg.server.global_params())


def _distance_to_sent(lam: float) -> float:
    """‖v − w²‖ summed over the clients after round 2, w² the global model round 2 sent."""
    fed = build_federation(load_config(None, ["algorithm=ditto", f"ditto.lam={lam}", *CORA]), 0)
    fed.fit_round(1)
    sent = {k: v.clone() for k, v in fed.runtime.server.global_params().items()}
    fed.fit_round(2)
    return sum(float(sum((ctx.state["params"][k] - sent[k]).norm() ** 2 for k in sent)) ** 0.5
               for ctx in fed.runtime.contexts)


@require("Cora")
def test_a_larger_lambda_pulls_the_personal_model_towards_the_global_one():
    free, pulled, tight = (_distance_to_sent(lam) for lam in (0.0, 1.0, 100.0))
    assert free > pulled > tight


@require("Cora")
def test_persistent_optimizers_keep_the_two_models_states_apart():
    runtime, _ = evaluated_after(["algorithm=ditto", "optimizer.persistent=true", *CORA])
    for ctx in runtime.contexts:
        personal = ctx.state["optimizer"]["state"]
        glob = ctx.state[GLOBAL_MEMORY]["optimizer"]["state"]
        assert personal.keys() == glob.keys()
        assert not torch.equal(personal[0]["exp_avg"], glob[0]["exp_avg"])


def test_a_negative_lambda_is_refused():
    result = CliRunner().invoke(app, ["run", "algorithm=ditto", "ditto.lam=-1"])
    assert "ditto.lam" in error_line(result)


def test_personal_epochs_below_one_are_refused():
    result = CliRunner().invoke(app, ["run", "algorithm=ditto", "ditto.personal_epochs=0"])
    assert "ditto.personal_epochs" in error_line(result)
