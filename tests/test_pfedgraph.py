"""pFedGraph: the closed-form graph weights against a numerical QP, the server's personalised
models and directions, the cosine regulariser, and which model is evaluated."""

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from graphfed.algorithms.personalized.pfedgraph import (
    PFedGraphServer,
    cosine_regulariser,
    graph_weights,
)
from graphfed.algorithms.registry import get_algorithm
from graphfed.mechanisms.client_network import stack
from graphfed.mechanisms.updates import under_prefix
from graphfed.messages import Message
from graphfed.protocol import Setup
from tests.conftest import evaluated_after, require


def _code_qp(d: np.ndarray, p: np.ndarray, alpha: float) -> np.ndarray:
    """The code's per-row problem, min x'(alpha I)x + (d - 2 alpha p)'x on the simplex, by
    SLSQP (pfedgraph_cosine/utils.py:71-92 solves it with cvxpy)."""
    q = d - 2 * alpha * p
    n = len(d)
    result = minimize(lambda x: alpha * x @ x + q @ x, np.full(n, 1 / n),
                      jac=lambda x: 2 * alpha * x + q, method="SLSQP",
                      bounds=[(0, None)] * n,
                      constraints=[{"type": "eq", "fun": lambda x: x.sum() - 1,
                                    "jac": lambda x: np.ones_like(x)}],
                      options={"ftol": 1e-15, "maxiter": 500})
    assert result.success, result.message
    return result.x


@pytest.mark.parametrize("seed", range(6))
def test_closed_form_weights_solve_the_codes_qp(seed):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(2, 9))
    updates = torch.tensor(rng.normal(size=(k, 20)))
    updates[1] = updates[0] + 0.1 * updates[1]  # a pair above the 0.9 threshold, usually
    unit = updates / updates.norm(dim=1, keepdim=True)
    cos = unit @ unit.t()
    sizes = torch.tensor(rng.integers(5, 50, size=k), dtype=torch.float64)
    alpha = float(rng.choice([0.05, 0.3, 0.8, 2.0]))
    a = graph_weights(cos, sizes, alpha, 0.9)
    assert (a >= 0).all() and torch.allclose(a.sum(1), torch.ones(k, dtype=torch.float64))
    d = -np.where(cos.numpy() > 0.9, 1.0, cos.numpy())
    p = sizes.numpy() / sizes.numpy().sum()
    for i in range(k):
        assert np.allclose(a[i].numpy(), _code_qp(d[i], p, alpha), atol=1e-6)


def test_threshold_counts_near_parallel_updates_as_parallel():
    cos = torch.tensor([[1.0, 0.95, 0.2], [0.95, 1.0, 0.1], [0.2, 0.1, 1.0]],
                       dtype=torch.float64)
    sizes = torch.tensor([10.0, 10.0, 10.0], dtype=torch.float64)
    same = cos.clone()
    same[0, 1] = same[1, 0] = 1.0
    assert torch.equal(graph_weights(cos, sizes, 0.8, 0.9), graph_weights(same, sizes, 0.8, 0.9))
    assert not torch.equal(graph_weights(cos, sizes, 0.8, 1.0),
                           graph_weights(same, sizes, 0.8, 1.0))
    # large alpha: the weights go to the size shares
    assert torch.allclose(graph_weights(cos, sizes, 1e9, 0.9), torch.full((3, 3), 1 / 3,
                                                                          dtype=torch.float64))


def test_regulariser_value_gradient_and_sign():
    g = torch.Generator().manual_seed(0)
    theta = {"w": torch.randn(4, 3, generator=g), "b": torch.randn(3, generator=g)}
    c = {"w": torch.randn(4, 3, generator=g), "b": torch.randn(3, generator=g)}
    live = {k: v.clone().requires_grad_(True) for k, v in theta.items()}
    lam = 0.01
    value = cosine_regulariser(lam, c)(live)
    value.backward()
    t, cv = stack([theta]), stack([c])
    n = t.norm()
    assert float(value.detach()) == pytest.approx(lam * float(t @ cv.t()) / float(n), rel=1e-5)
    expected = lam * (cv / n - float(t @ cv.t()) * t / n ** 3)  # d/dθ λ<c,θ>/|θ|
    grad = stack([{k: v.grad for k, v in live.items()}])
    assert torch.allclose(grad, expected, atol=1e-7)
    # the code's sign: a step down its gradient lowers the cosine between θ and c
    step = {k: v.detach() - 10 * v.grad for k, v in live.items()}

    def cosine(params):
        a, b = stack([params])[0], cv[0]
        return float(a @ b / (a.norm() * b.norm()))

    assert cosine(step) < cosine(theta)


def _server(k=3, **options):
    algorithm = get_algorithm("pfedgraph")
    params = {"w": torch.zeros(2, 2), "b": torch.ones(2)}
    setup = Setup(level="graph", num_clients=k, num_classes=2, initial_params=params,
                  options=algorithm.options(**options))
    return algorithm.server(setup)


def _replies(models, sizes):
    return {c: Message(m, {"num_samples": s})
            for c, (m, s) in enumerate(zip(models, sizes, strict=True))}


def test_server_sends_each_client_its_mix_and_direction():
    server: PFedGraphServer = _server()
    assert all(m.tensors == {} for m in server.configure_fit(1, [0, 1, 2]).values())
    g = torch.Generator().manual_seed(3)
    models = [{"w": torch.randn(2, 2, generator=g), "b": torch.randn(2, generator=g)}
              for _ in range(3)]
    server.aggregate_fit(1, _replies(models, [10, 20, 30]))
    a = torch.tensor(server.round_metrics()["weights"], dtype=torch.float64)
    updates = stack(models) - stack([server.setup.initial_params])
    unit = updates / updates.norm(dim=1, keepdim=True)
    assert torch.allclose(a, graph_weights(unit @ unit.t(), torch.tensor([10.0, 20, 30]),
                                           0.8, 0.9), atol=1e-12)
    flat = stack(models)
    for i, message in server.configure_fit(2, [0, 1, 2]).items():
        model, direction = (stack([under_prefix(message.tensors, p)], ["w", "b"])[0]
                            for p in ("model.", "direction."))
        assert torch.allclose(model, a[i] @ flat, atol=1e-6)
        assert torch.allclose(direction, a[i] @ (flat / flat.norm(dim=1, keepdim=True)),
                              atol=1e-6)
    assert server.configure_evaluate(2, [0])[0].tensors == {}
    after = _server(evaluate="after_aggregation")
    after.aggregate_fit(1, _replies(models, [10, 20, 30]))
    sent = after.configure_evaluate(2, [1])[1].tensors
    assert sorted(sent) == ["model.b", "model.w"]


OVERRIDES = ["algorithm=pfedgraph", "dataset=MUTAG", "partition=dirichlet", "model=gin",
             "num_clients=3", "device=cpu"]


@require("MUTAG")
@pytest.mark.parametrize("when", ["before_aggregation", "after_aggregation"])
def test_evaluated_model_is_the_trained_one_or_the_aggregate(when):
    runtime, records = evaluated_after([*OVERRIDES, f"pfedgraph.evaluate={when}"])
    for ctx, record in zip(runtime.contexts, records, strict=True):
        trained = ctx.state["params"]
        aggregate = under_prefix(runtime.server.outbox[ctx.client_id], "model.")
        evaluated = trained if when == "before_aggregation" else aggregate
        expected = ctx.trainer.evaluate(evaluated, ctx.data)["test"]["loss"]
        assert record["test_loss"] == expected
        assert not torch.equal(trained["pre.weight"], aggregate["pre.weight"])
