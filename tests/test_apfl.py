"""APFL: the α gradient against autograd, the direction and projection of α's step, the
reductions to FedAvg (α = 0) and to the client's own local model (α = 1), and a learned α."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from typer.testing import CliRunner

from graphfed.algorithms.personalized.apfl import (
    ALPHA,
    LOCAL_W,
    PersonalStep,
    alpha_gradient,
    mixture,
    projected_alpha_step,
)
from graphfed.cli import app
from graphfed.training import OptimizerOptions, Trainer
from tests.conftest import error_line, evaluated_after, require

CORA = ["dataset=Cora", "partition=metis", "num_clients=3", "device=cpu", "engine=sequential"]


def _tiny_model(seed: int):
    g = torch.Generator().manual_seed(seed)
    return {"weight": torch.randn(4, 3, generator=g, dtype=torch.float64),
            "bias": torch.randn(3, generator=g, dtype=torch.float64)}


def test_alpha_gradient_matches_autograd_on_a_tiny_model():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 4, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (8,), generator=g)
    v, w = _tiny_model(1), _tiny_model(2)

    def loss(p):
        return F.cross_entropy(x @ p["weight"] + p["bias"], y)

    for a in (0.0, 0.3, 1.0):
        alpha = torch.tensor(a, dtype=torch.float64, requires_grad=True)
        (expected,) = torch.autograd.grad(loss(mixture(alpha, v, w)), [alpha])
        mixed = {k: t.clone().requires_grad_(True) for k, t in mixture(a, v, w).items()}
        grads = torch.autograd.grad(loss(mixed), list(mixed.values()))
        gradient = dict(zip(mixed, grads, strict=True))
        assert alpha_gradient(v, w, gradient).item() == pytest.approx(expected.item(), rel=1e-12)


def test_alpha_moves_towards_the_model_nearer_the_optimum():
    """f(p) = ½‖p − v‖²: the local model v is the optimum, so ∇f(v̄) = (1 − α)(w − v), the
    α gradient is −(1 − α)‖v − w‖² < 0 and α grows; with w the optimum it shrinks."""
    v, w = {"p": torch.tensor([1.0, 2.0])}, {"p": torch.tensor([0.0, 0.0])}
    alpha = 0.5
    towards_v = alpha_gradient(v, w, {"p": mixture(alpha, v, w)["p"] - v["p"]}).item()
    assert towards_v == pytest.approx(-(1 - alpha) * 5.0)
    assert projected_alpha_step(alpha, towards_v, lr=0.1, l2=0.0) == pytest.approx(0.75)
    towards_w = alpha_gradient(v, w, {"p": mixture(alpha, v, w)["p"] - w["p"]}).item()
    assert towards_w == pytest.approx(alpha * 5.0)
    assert projected_alpha_step(alpha, towards_w, lr=0.1, l2=0.0) == pytest.approx(0.25)


def test_alpha_step_is_projected_onto_the_unit_interval_and_decays_with_l2():
    assert projected_alpha_step(0.5, -100.0, lr=0.1, l2=0.0) == 1.0
    assert projected_alpha_step(0.5, 100.0, lr=0.1, l2=0.0) == 0.0
    assert projected_alpha_step(0.5, 0.0, lr=0.1, l2=0.02) == pytest.approx(0.5 - 0.1 * 0.01)


def test_personal_step_is_the_papers_sgd_step_of_v_and_alpha():
    """With plain SGD: v ← v − ηα∇f(v̄) and α ← α − η_α⟨v − w, ∇f(v̄)⟩, both at the step's
    start; w is not touched."""
    torch.manual_seed(0)
    x, y = torch.randn(6, 4), torch.tensor([0, 1, 2, 0, 1, 2])
    batch = SimpleNamespace(forward=lambda model, call, **kw: call(model, (x,)), targets=y)
    model = nn.Linear(4, 3)
    trainer = Trainer(model, OptimizerOptions(name="sgd", lr=0.1, weight_decay=0.0), 3)
    w = {k: t.detach().clone() for k, t in model.named_parameters()}
    v = {k: t + 0.3 * torch.randn_like(t) for k, t in w.items()}
    step = PersonalStep(trainer, v, 0.4, alpha_lr=0.05, alpha_l2=0.0, memory=None)
    step(w, batch)

    mixed = {k: t.clone().requires_grad_(True) for k, t in mixture(0.4, v, w).items()}
    loss = F.cross_entropy(torch.func.functional_call(model, mixed, (x,)), y)
    grad = dict(zip(mixed, torch.autograd.grad(loss, list(mixed.values())), strict=True))
    dot = sum(((v[k] - w[k]) * grad[k]).sum() for k in v).item()
    assert step.alpha == pytest.approx(0.4 - 0.05 * dot, rel=1e-6) and dot != 0
    for k, t in step.trained().items():
        assert torch.allclose(t, v[k] - 0.1 * 0.4 * grad[k], atol=1e-7)


@pytest.fixture(scope="module")
def fedavg():
    return evaluated_after(["algorithm=fedavg", *CORA])


def _same_params(a, b):
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


@require("Cora")
def test_alpha_fixed_at_zero_is_fedavg(fedavg):
    """v̄ = w: every client deploys the FedAvg-trained global model and the server holds
    FedAvg's model, to the bit."""
    runtime, records = evaluated_after(["algorithm=apfl", "apfl.alpha=0",
                                        "apfl.learn_alpha=false", *CORA])
    fed_runtime, fed_records = fedavg
    assert _same_params(runtime.server.global_params(), fed_runtime.server.global_params())
    assert records == fed_records
    assert all(ctx.state[ALPHA] == 0.0 for ctx in runtime.contexts)


@require("Cora")
def test_alpha_fixed_at_one_evaluates_the_clients_own_local_model(fedavg):
    runtime, records = evaluated_after(["algorithm=apfl", "apfl.alpha=1",
                                        "apfl.learn_alpha=false", *CORA])
    glob = runtime.server.global_params()
    for ctx, record in zip(runtime.contexts, records, strict=True):
        own = ctx.state["params"]
        assert record["test_loss"] == ctx.trainer.evaluate(own, ctx.data)["test"]["loss"]
        assert not torch.equal(own["convs.0.lin.weight"], glob["convs.0.lin.weight"])
    # w never reads v or α: the server's model is FedAvg's whatever α is
    assert _same_params(glob, fedavg[0].server.global_params())


@require("Cora")
def test_learned_alpha_moves_stays_in_the_unit_interval_and_is_deployed():
    runtime, records = evaluated_after(["algorithm=apfl", "local_epochs=5", *CORA])
    glob = runtime.server.global_params()
    alphas = [ctx.state[ALPHA] for ctx in runtime.contexts]
    assert all(0.0 <= a <= 1.0 for a in alphas)
    assert all(a != 0.5 for a in alphas) and len(set(alphas)) == 3  # one α per client
    for ctx, record, a in zip(runtime.contexts, records, alphas, strict=True):
        deployed = mixture(a, ctx.state["params"], glob)
        assert record["test_loss"] == ctx.trainer.evaluate(deployed, ctx.data)["test"]["loss"]


@require("MUTAG")
def test_graph_level_deploys_the_mixture_with_its_local_w():
    runtime, records = evaluated_after(["algorithm=apfl", "apfl.deploy_with=local",
                                        "dataset=MUTAG", "partition=dirichlet", "model=gin",
                                        "num_clients=3", "device=cpu"])
    for ctx, record in zip(runtime.contexts, records, strict=True):
        local_w = ctx.state[LOCAL_W]
        assert not _same_params(local_w, runtime.server.global_params())
        deployed = mixture(ctx.state[ALPHA], ctx.state["params"], local_w)
        assert record["test_loss"] == ctx.trainer.evaluate(deployed, ctx.data)["test"]["loss"]


def test_alpha_outside_the_unit_interval_is_refused():
    result = CliRunner().invoke(app, ["run", "algorithm=apfl", "apfl.alpha=1.5"])
    assert "apfl.alpha" in error_line(result)
