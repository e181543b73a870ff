"""FedALA: the ALA step against its formula, the aggregation's two ends, learned weights that
move and stay in [0, 1] on the top layers only, η = 0 reducing the server to FedAvg, and the
first learning running until its losses settle."""

import pytest
import torch
from typer.testing import CliRunner

from graphfed.algorithms.personalized.fedala import (
    WEIGHTS,
    AdaptiveLocalAggregation,
    FedALAOptions,
    aggregate,
    sample_batches,
    weight_step,
)
from graphfed.cli import app
from tests.conftest import error_line, evaluated_after, require

CORA = ["dataset=Cora", "partition=metis", "num_clients=3", "device=cpu", "engine=sequential"]


def test_aggregation_takes_the_global_model_below_and_mixes_it_on_top():
    local = {"low": torch.zeros(3), "top": torch.zeros(2)}
    glob = {"low": torch.ones(3), "top": torch.tensor([2.0, 4.0])}
    mixed = aggregate(local, glob, {"top": torch.tensor([1.0, 0.25])})
    assert torch.equal(mixed["low"], glob["low"])
    assert torch.equal(mixed["top"], torch.tensor([2.0, 1.0]))
    assert torch.equal(aggregate(local, glob, {"top": torch.zeros(2)})["top"], local["top"])


def test_weight_step_follows_the_chain_rule_and_is_clipped_to_the_unit_interval():
    local, glob = {"top": torch.tensor([0.0, 0.0, 1.0])}, {"top": torch.tensor([1.0, 2.0, 0.0])}
    weights = {"top": torch.tensor([0.5, 0.5, 0.5])}
    gradient = {"top": torch.tensor([0.1, 10.0, 10.0])}
    # W − η g (Θ − θ): 0.5 − 0.1·1 = 0.4; 0.5 − 20 → 0; 0.5 + 10 → 1
    stepped = weight_step(weights, gradient, local, glob, eta=1.0)["top"]
    assert torch.allclose(stepped, torch.tensor([0.4, 0.0, 1.0]))


@require("Cora")
def test_learned_weights_move_stay_in_the_unit_interval_and_cover_the_top_layer_only():
    runtime, records = evaluated_after(["algorithm=fedala", *CORA], rounds=3)
    for ctx, record in zip(runtime.contexts, records, strict=True):
        weights = ctx.state[WEIGHTS]
        assert set(weights) == {"convs.1.bias", "convs.1.lin.weight"}
        values = torch.cat([w.flatten() for w in weights.values()])
        assert values.min() >= 0.0 and values.max() <= 1.0
        assert (values < 1.0).any()  # learned, not left at their start
        own = ctx.state["params"]
        assert record["test_loss"] == ctx.trainer.evaluate(own, ctx.data)["test"]["loss"]


@require("Cora")
def test_eta_zero_keeps_every_weight_at_one_and_the_server_is_fedavg():
    runtime, _ = evaluated_after(["algorithm=fedala", "fedala.eta=0", *CORA], rounds=3)
    fedavg, _ = evaluated_after(["algorithm=fedavg", *CORA], rounds=3)
    glob, expected = runtime.server.global_params(), fedavg.server.global_params()
    assert all(torch.equal(glob[k], expected[k]) for k in expected)
    for ctx in runtime.contexts:
        assert all(bool((w == 1.0).all()) for w in ctx.state[WEIGHTS].values())


@require("Cora")
def test_the_first_learning_runs_until_the_last_losses_settle():
    runtime, _ = evaluated_after(["algorithm=fedavg", *CORA], rounds=1)
    ctx = runtime.contexts[0]
    glob = runtime.server.global_params()
    local = runtime.server.setup.initial_params
    options = FedALAOptions(threshold=0.05)
    top = {k: torch.ones_like(v) for k, v in glob.items() if k.startswith("convs.1.")}
    ala = AdaptiveLocalAggregation(ctx.trainer, options, local, glob, top)
    batches = sample_batches(ctx.data, options.rand_percent, None)
    losses = ala.learn(batches, converge=True)
    settled = torch.tensor(losses[-options.window:], dtype=torch.float64).std(unbiased=False)
    assert len(losses) > options.window and settled < options.threshold
    assert len(ala.learn(batches, converge=False)) == 1  # later rounds: one epoch


@require("MUTAG")
def test_at_graph_level_the_readout_is_learned():
    runtime, _ = evaluated_after(["algorithm=fedala", "dataset=MUTAG", "partition=dirichlet",
                                  "model=gin", "num_clients=3", "device=cpu"], rounds=3)
    for ctx in runtime.contexts:
        assert set(ctx.state[WEIGHTS]) == {"readout.weight", "readout.bias"}
        values = torch.cat([w.flatten() for w in ctx.state[WEIGHTS].values()])
        assert values.min() >= 0.0 and values.max() <= 1.0


@pytest.mark.parametrize(("option", "shown"), [("fedala.rand_percent=0", "fedala.rand_percent"),
                                                ("fedala.eta=-1", "fedala.eta")])
def test_out_of_range_options_are_refused(option, shown):
    assert shown in error_line(CliRunner().invoke(app, ["run", "algorithm=fedala", option]))


@require("Cora")
def test_more_top_layers_than_the_model_has_is_one_error_line():
    result = CliRunner().invoke(app, ["run", "algorithm=fedala", *CORA, "rounds=1",
                                      "fedala.layers=3", "--out", "/tmp/m1/fedala-refused"])
    assert "too many" in error_line(result)
