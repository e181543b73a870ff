"""client_eval=trained: each client scored with the model its latest local step ended with
(FED-PUB's code scores its baselines so), on either engine; deployed stays the default."""

import pytest
import torch
from typer.testing import CliRunner

from graphfed.algorithms.registry import load_all
from graphfed.cli import app
from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.protocol import TRAINED
from tests.conftest import error_line, require

pytestmark = require("Cora")
SMALL = ["dataset=Cora", "partition=metis", "num_clients=3", "rounds=1", "device=cpu",
         "model.hidden=16"]


def one_round(*extra: str):
    fed = build_federation(load_config(None, [*SMALL, *extra]), 0)
    fed.fit_round(1)
    return fed, fed.evaluate(1)


@pytest.mark.parametrize("engine", ["sequential", "batched"])
def test_trained_scores_each_client_on_the_parameters_its_local_step_ended_with(engine):
    fed, line = one_round("algorithm=fedavg", "client_eval=trained", f"engine={engine}")
    deployed = fed.runtime.server.params  # the average the clients would be sent next
    for record in line["clients"]:
        ctx = fed.runtime.contexts[record["client"]]
        trained = ctx.state[TRAINED]
        assert not torch.equal(trained["convs.0.lin.weight"].cpu(),
                               deployed["convs.0.lin.weight"])
        own = fed.runtime.client.evaluate_params(trained, ctx)
        assert record["test_acc"] == own["test"]["acc"]
        assert record["val_acc"] == own["val"]["acc"]


def test_deployed_is_the_default_and_keeps_no_trained_copy():
    fed, line = one_round("algorithm=fedavg")
    assert fed.config.client_eval == "deployed"
    assert all(TRAINED not in ctx.state for ctx in fed.runtime.contexts)
    ctx = fed.runtime.contexts[0]
    sent = fed.runtime.client.evaluate_params(fed.runtime.server.params, ctx)
    assert line["clients"][0]["test_acc"] == sent["test"]["acc"]


def test_a_client_that_deploys_its_trained_model_scores_the_same_either_way():
    _, trained = one_round("algorithm=local", "client_eval=trained", "engine=sequential")
    _, deployed = one_round("algorithm=local", "engine=sequential")
    assert [c["test_acc"] for c in trained["clients"]] == [c["test_acc"]
                                                          for c in deployed["clients"]]


def test_an_algorithm_whose_fit_is_not_a_local_step_is_refused_in_one_line(tmp_path):
    name = next(n for n, a in sorted(load_all().items())
                if not a.batched and "node" in a.levels and a.name != "fairgfl")
    result = CliRunner().invoke(app, ["run", "configs/quickstart.yaml", f"algorithm={name}",
                                      "client_eval=trained", "--out", str(tmp_path / "r"),
                                      "--quiet"])
    assert "client_eval=trained" in error_line(result)
    assert not (tmp_path / "r").exists()
