"""MOON: the representation it contrasts, its limits (μ = 0 and τ → ∞ are FedAvg; the first
local training, without a previous model, is FedAvg's), and the pull of its loss towards the
global model's representation, on Cora and MUTAG."""

import math
from dataclasses import replace

import pytest
import torch
from typer.testing import CliRunner

from graphfed.algorithms.averaging.moon import (
    PREVIOUS,
    MoonClient,
    MoonOptions,
    model_contrastive_loss,
)
from graphfed.cli import app
from graphfed.mechanisms.representation import RepresentationTap, output_layer
from graphfed.messages import Message
from graphfed.models.by_level import build_model
from graphfed.models.gnn import ModelOptions
from tests.conftest import error_line, evaluated_after, require

CORA = ["dataset=Cora", "partition=metis", "num_clients=3", "device=cpu", "engine=sequential"]


@pytest.fixture(scope="module")
def fedavg():
    return evaluated_after(["algorithm=fedavg", *CORA])


def _same_params(a, b):
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def _representation(ctx, params):
    """The training nodes' representations under ``params`` (evaluation mode)."""
    with RepresentationTap(ctx.trainer.model) as tap:
        ctx.trainer.outputs(params, ctx.data, ("train",))
        return tap.read()[ctx.data.index["train"]]


def test_the_representation_is_what_each_backbones_output_layer_reads():
    node = build_model("node", 12, 3, ModelOptions(name="gcn", hidden=16, layers=3))
    graph = build_model("graph", 12, 3, ModelOptions(name="gin", hidden=16))
    fedego = build_model("node", 12, 3, ModelOptions(name="mlp_sage", hidden=16))
    assert output_layer(node) is node.convs[-1]
    assert output_layer(graph) is graph.readout
    assert output_layer(fedego) is fedego.classifier
    x = torch.randn(5, 12)
    edges = torch.tensor([[0, 1, 2, 3], [1, 2, 3, 4]])
    node.eval()
    with RepresentationTap(node) as tap:
        logits = node(x, edges)
        hidden = tap.read()
    assert hidden.shape == (5, 16) and logits.shape == (5, 3)
    assert torch.allclose(node.convs[-1](hidden, edges), logits)
    assert not node.convs[-1]._forward_pre_hooks  # the tap leaves no hook behind


@require("Cora")
def test_loss_tends_to_log_two_with_a_vanishing_gradient_as_temperature_grows(fedavg):
    """τ → ∞: both similarities divided by τ go to 0, ℓ_con → log 2, a constant: the stated
    limit in which MOON's objective is FedAvg's."""
    runtime, _ = fedavg
    ctx = runtime.contexts[0]
    glob = runtime.server.global_params()
    z_glob = _representation(ctx, glob).double()
    z_prev = _representation(ctx, runtime.server.setup.initial_params).double()
    z = z_glob + 0.5 * torch.randn_like(z_glob)
    z.requires_grad_(True)
    for tau, tolerance in ((0.5, None), (1e3, 1e-3), (1e9, 1e-9)):
        loss = model_contrastive_loss(z, z_glob, z_prev, tau)
        (grad,) = torch.autograd.grad(loss, [z])
        if tolerance is None:
            assert abs(loss.item() - math.log(2)) > 1e-2 and grad.abs().max() > 1e-4
        else:
            assert loss.item() == pytest.approx(math.log(2), abs=tolerance)
            assert grad.abs().max() < tolerance


@require("Cora")
def test_mu_zero_is_fedavg_to_the_bit(fedavg):
    runtime, records = evaluated_after(["algorithm=moon", "moon.mu=0", *CORA])
    fed_runtime, fed_records = fedavg
    assert _same_params(runtime.server.global_params(), fed_runtime.server.global_params())
    assert records == fed_records
    assert all(PREVIOUS in ctx.state for ctx in runtime.contexts)


@require("Cora")
def test_a_huge_temperature_is_fedavg_up_to_rounding(fedavg):
    runtime, _ = evaluated_after(["algorithm=moon", "moon.temperature=1e12", "moon.mu=5", *CORA])
    ours, theirs = runtime.server.global_params(), fedavg[0].server.global_params()
    assert all(torch.allclose(ours[k], theirs[k], atol=1e-5) for k in theirs)


@require("Cora")
def test_first_local_training_without_a_previous_model_is_fedavgs():
    """The authors' code contrasts with no previous model in the first round (an empty pool):
    one round of MOON, at any μ, is one round of FedAvg."""
    moon, _ = evaluated_after(["algorithm=moon", "moon.mu=5", *CORA], rounds=1)
    fedavg, _ = evaluated_after(["algorithm=fedavg", *CORA], rounds=1)
    assert _same_params(moon.server.global_params(), fedavg.server.global_params())


@require("Cora")
def test_the_contrast_pulls_the_representation_to_the_global_models():
    """From the same global and previous model, a client trained with μ = 5 ends with
    representations nearer the global model's, relative to its previous model's, than one
    trained with μ = 0: a lower ℓ_con."""
    runtime, _ = evaluated_after(["algorithm=moon", "moon.mu=0", "local_epochs=5", *CORA],
                                 rounds=1)
    glob = runtime.server.global_params()
    ctx = runtime.contexts[0]
    previous = ctx.state[PREVIOUS]
    z_glob, z_prev = _representation(ctx, glob), _representation(ctx, previous)
    scores = {}
    for mu in (0.0, 5.0):
        client = MoonClient(replace(runtime.client.setup, options=MoonOptions(mu=mu)))
        ctx.state[PREVIOUS] = previous
        torch.manual_seed(0)
        trained = client.fit(Message(tensors=glob), ctx).tensors
        z = _representation(ctx, trained)
        scores[mu] = model_contrastive_loss(z, z_glob, z_prev, 0.5).item()
    assert scores[5.0] < scores[0.0] - 0.01


@require("MUTAG")
def test_graph_level_contrasts_graph_representations():
    runtime, records = evaluated_after(["algorithm=moon", "dataset=MUTAG", "partition=dirichlet",
                                        "model=gin", "num_clients=3", "device=cpu"])
    assert all(PREVIOUS in ctx.state for ctx in runtime.contexts)
    assert len(records) == 3


def test_a_node_model_without_a_hidden_representation_is_refused():
    result = CliRunner().invoke(app, ["run", "algorithm=moon", "model=sgc"])
    assert "moon" in error_line(result)
