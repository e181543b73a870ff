"""FedAMP: the GPFL code's and the paper's attention weights, the cloud models, the proximal
pull, and that the client's own model is the one evaluated."""

from types import SimpleNamespace

import pytest
import torch

from graphfed.algorithms.personalized.fedamp import code_weights, paper_weights
from graphfed.algorithms.registry import get_algorithm
from graphfed.mechanisms.client_network import stack
from graphfed.messages import Message
from graphfed.protocol import Setup
from tests.conftest import evaluated_after, require

INITIAL = {"w": torch.zeros(2, 3), "b": torch.full((3,), 0.5)}


def _setup(**options):
    algorithm = get_algorithm("fedamp")
    return algorithm, Setup(level="graph", num_clients=4, num_classes=2,
                            initial_params=INITIAL, options=algorithm.options(**options))


def _models(k=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [{"w": torch.randn(2, 3, generator=g), "b": torch.randn(3, generator=g)}
            for _ in range(k)]


def _replies(models):
    return {c: Message(m, {"num_samples": 10}) for c, m in enumerate(models)}


def test_code_weights_follow_the_codes_formula():
    """fedamp/utils.py:60-70: exp(10 cos), self zeroed, scaled to 0.7, self weight 0.3."""
    g = torch.Generator().manual_seed(1)
    v = torch.randn(5, 7, generator=g, dtype=torch.float64)
    v = v / v.norm(dim=1, keepdim=True)
    cos = v @ v.t()
    w = code_weights(cos, 0.3, 10.0)
    for i in range(5):
        e = torch.exp(10 * cos[i])
        e[i] = 0
        expected = 0.7 * e / e.sum()
        expected[i] = 0.3
        assert torch.allclose(w[i], expected, atol=1e-12)
    assert torch.allclose(w.sum(1), torch.ones(5, dtype=torch.float64))
    assert torch.equal(w.diagonal(), torch.full((5,), 0.3, dtype=torch.float64))
    assert torch.equal(code_weights(torch.ones(1, 1), 0.3, 10.0), torch.ones(1, 1).double())
    assert torch.isfinite(code_weights(cos, 0.3, 1e4)).all()  # no exp overflow


def test_paper_weights_are_a_gradient_step_of_the_attention_function():
    sq = torch.tensor([[0.0, 1.0, 4.0], [1.0, 0.0, 2.0], [4.0, 2.0, 0.0]], dtype=torch.float64)
    w = paper_weights(sq, alpha_k=0.2, sigma=2.0)
    assert w[0, 1] == pytest.approx(0.2 / 2.0 * torch.exp(torch.tensor(-0.5)).item())
    assert w[2, 0] == pytest.approx(0.1 * torch.exp(torch.tensor(-2.0)).item())
    assert torch.allclose(w.sum(1), torch.ones(3, dtype=torch.float64))
    assert w[1, 1] == pytest.approx(1 - w[1, 0].item() - w[1, 2].item())
    assert torch.allclose(w, w.t())  # symmetric distances, symmetric off-diagonal weights


@pytest.mark.parametrize("variant", ["gpfl_code", "paper"])
def test_identical_clients_get_the_common_model(variant):
    algorithm, setup = _setup(variant=variant)
    server = algorithm.server(setup)
    common = _models(1)[0]
    server.aggregate_fit(1, _replies([common] * 4))
    rows = torch.tensor(server.round_metrics()["weights"], dtype=torch.float64)
    assert torch.allclose(rows.sum(1), torch.ones(4, dtype=torch.float64))
    for message in server.configure_fit(2, [0, 1, 2, 3]).values():
        assert torch.allclose(stack([message.tensors], ["w", "b"]),
                              stack([common], ["w", "b"]), atol=1e-6)


def test_cloud_model_is_the_weighted_mix_of_this_rounds_models():
    algorithm, setup = _setup()
    server = algorithm.server(setup)
    models = _models()
    server.aggregate_fit(1, _replies(models))
    w = torch.tensor(server.round_metrics()["weights"], dtype=torch.float64)
    updates = stack(models) - stack([INITIAL])
    unit = updates / updates.norm(dim=1, keepdim=True)
    assert torch.allclose(w, code_weights(unit @ unit.t(), 0.3, 10.0), atol=1e-12)
    sent = server.configure_fit(2, [2])[2].tensors
    assert torch.allclose(stack([sent], ["w", "b"])[0], w[2] @ stack(models), atol=1e-6)


@pytest.mark.parametrize(("variant", "mu"), [("gpfl_code", 1.0), ("paper", 1.0 / 0.1)])
def test_proximal_gradient_is_lambda_theta_minus_u(variant, mu):
    algorithm, setup = _setup(variant=variant)
    client = algorithm.client(setup)
    own, anchor = _models(2, seed=4)
    ctx = SimpleNamespace(state={"params": own})
    step = client.local_step(Message(anchor), ctx)
    assert step.params is own and step.proximal_mu == pytest.approx(mu)
    live = {k: v.clone().requires_grad_(True) for k, v in own.items()}
    step.extra_loss()(live).backward()
    for k in own:
        assert torch.allclose(live[k].grad, mu * (own[k] - anchor[k]), atol=1e-6)


def test_first_round_pull():
    """No cloud model yet: the code trains without the term, the paper pulls towards u¹ = θ⁰."""
    ctx = SimpleNamespace(state={})
    algorithm, setup = _setup()
    assert algorithm.client(setup).local_step(Message(), ctx).extra_loss() is None
    algorithm, setup = _setup(variant="paper")
    step = algorithm.client(setup).local_step(Message(), ctx)
    assert step.anchor is INITIAL and step.extra_loss() is not None


@require("MUTAG")
def test_client_keeps_and_is_evaluated_on_its_own_model():
    runtime, records = evaluated_after(["algorithm=fedamp", "dataset=MUTAG", "partition=dirichlet",
                                        "model=gin", "num_clients=3", "device=cpu"])
    for ctx, record in zip(runtime.contexts, records, strict=True):
        own = ctx.state["params"]
        assert record["test_loss"] == ctx.trainer.evaluate(own, ctx.data)["test"]["loss"]
        cloud = runtime.server.outbox[ctx.client_id]
        assert not torch.equal(own["pre.weight"], cloud["pre.weight"])
