"""FedEgo's node-classification baselines: the mlp_sage model, adaptive FedProx, D-FedGNN,
FedGCN and GraphFL. Mechanics on small real data (Cora, METIS, a few clients) plus smoke runs."""

import math

import pytest
import torch

from graphfed.algorithms.base import Message
from graphfed.algorithms.fedprox import AdaptiveProximalTerm, adapt_mu, normalised_distance
from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.models.gnn import ModelOptions, build_model
from tests.conftest import require

SMALL = ["dataset=Cora", "partition=metis", "device=cpu", "model.name=mlp_sage",
         "model.hidden=16", "eval_every=100"]


def _federation(*overrides, clients=3):
    return build_federation(load_config(None, [*SMALL, f"num_clients={clients}", *overrides]), 0)


def _count(params, prefixes):
    return sum(p.numel() for k, p in params if k.startswith(prefixes))


# ---------------------------------------------------------------- the shared layer shape

@require("Cora")
def test_mlp_sage_has_fedegos_parameter_counts_on_cora(cora):
    d, c = cora.graph.x.size(1), int(cora.graph.y.max()) + 1
    model = build_model("node", d, c, ModelOptions(name="mlp_sage", hidden=512))
    params = list(model.named_parameters())
    assert _count(params, ("reduction.",)) == 734_208
    assert _count(params, ("convs.", "classifier.")) == 1_053_184
    assert {k.split(".")[0] for k, _ in params} == {"reduction", "convs", "classifier"}
    assert "classifier.bias" not in dict(params)
    model.eval()
    out = model(cora.graph.x[:50], torch.tensor([[0, 1, 2], [1, 2, 0]]))
    assert out.shape == (50, c)
    with pytest.raises(ValueError, match="node-level"):
        build_model("graph", d, c, ModelOptions(name="mlp_sage"))


# ---------------------------------------------------------------- adaptive FedProx

def test_adaptive_mu_moves_by_ten_within_fedegos_bounds():
    assert adapt_mu(1.0, loss=1.0, prox=0.0) == 10.0  # loss > 5 mu prox, mu <= 1
    assert adapt_mu(10.0, loss=1.0, prox=0.0) == 10.0  # mu > 1: no further increase
    assert adapt_mu(1.0, loss=0.1, prox=1.0) == pytest.approx(0.1)  # loss < mu prox / 2
    assert adapt_mu(1e-5, loss=0.0, prox=1.0) == 1e-5  # mu < 1e-4: no further decrease
    assert adapt_mu(1.0, loss=1.0, prox=1.0) == 1.0  # in between: unchanged


def test_adaptive_term_is_size_normalised_frobenius_and_adapts_before_use():
    anchor = {"a": torch.zeros(4), "b": torch.zeros(2, 3)}
    live = {"a": torch.ones(4, requires_grad=True), "b": torch.zeros(2, 3, requires_grad=True)}
    # ||1_4||_F / 4 + 0 = 2 / 4
    assert float(normalised_distance(live, anchor).detach()) == pytest.approx(0.5)
    term = AdaptiveProximalTerm(1.0, anchor)
    value = term(live, torch.tensor(10.0))  # 10 > 5 * 1 * 0.5: mu -> 10, then used
    assert term.mu == 10.0 and float(value.detach()) == pytest.approx(5.0)
    value.backward()
    assert torch.allclose(live["a"].grad, torch.full((4,), 10.0 * 0.5 / 4))
    assert torch.equal(live["b"].grad, torch.zeros(2, 3))  # at w = w_start: 0, not NaN
    value = term(live, torch.tensor(1.0))  # 1 < 10 * 0.5 / 2: mu -> 1
    assert term.mu == pytest.approx(1.0) and float(value.detach()) == pytest.approx(0.5)
    detached = AdaptiveProximalTerm(1.0, anchor, detached=True)
    assert not detached(live, torch.tensor(0.0)).requires_grad  # FedEgo's code: no gradient


@require("Cora")
def test_adaptive_fedprox_keeps_mu_per_client_across_rounds():
    fed = _federation("algorithm=fedprox", "fedprox.adaptive=true")
    fed.fit_round(1)
    states = [ctx.state for ctx in fed.runtime.contexts]
    mus = [s["fedprox_mu"] for s in states]
    # the first batch starts at w = w_start (prox 0), so mu jumps 1 -> 10 at once
    assert all(math.log10(mu) == pytest.approx(round(math.log10(mu))) for mu in mus)
    assert all(1e-5 <= mu <= 10 for mu in mus)
    states[0]["fedprox_mu"] = 1e-3  # the next round starts from the client's own mu
    client = fed.runtime.client
    ctx = fed.runtime.contexts[0]
    seen = []
    original = AdaptiveProximalTerm.__init__

    def spy(self, mu, anchor, detached=False):
        seen.append(mu)
        original(self, mu, anchor, detached)

    AdaptiveProximalTerm.__init__ = spy
    try:
        reply = client.fit(Message(tensors=fed.runtime.server.params), ctx)
    finally:
        AdaptiveProximalTerm.__init__ = original
    assert seen == [1e-3]
    assert reply.scalars["mu"] == ctx.state["fedprox_mu"]
    plain = _federation("algorithm=fedprox")
    plain.fit_round(1)
    assert all("fedprox_mu" not in c.state for c in plain.runtime.contexts)


# ---------------------------------------------------------------- D-FedGNN

@require("Cora")
def test_dfedgnn_client_trains_from_the_mean_of_its_ring():
    fed = _federation("algorithm=d-fedgnn", clients=4)
    server, client = fed.runtime.server, fed.runtime.client
    record = fed.fit_round(1)
    size = sum(v.numel() * v.element_size() for v in server.setup.initial_params.values())
    assert record["bytes_down"] == 0 and record["bytes_up"] >= 4 * size  # + scalars
    assert server.global_params() is None
    trained = {c: dict(m) for c, m in server.models.items()}
    starts = {}
    original = type(client).local_train

    def spy(self, params, ctx, *args, **kwargs):
        starts[ctx.client_id] = {k: v.clone() for k, v in params.items()}
        return original(self, params, ctx, *args, **kwargs)

    type(client).local_train = spy
    try:
        record = fed.fit_round(2)
    finally:
        type(client).local_train = original
    assert record["bytes_down"] == 4 * 2 * size  # exactly two neighbour models per client
    for c in range(4):
        ring = [(c - 1) % 4, c, (c + 1) % 4]
        for k, v in starts[c].items():
            expected = sum(trained[r][k] for r in ring) / 3
            assert torch.allclose(v, expected, atol=1e-6), (c, k)
    # client 0's ring {3, 0, 1} leaves out client 2: not the global mean
    assert not torch.allclose(starts[0]["classifier.weight"], starts[2]["classifier.weight"])
    # evaluation deploys the same average the next round would train from
    c = 1
    message = server.configure_evaluate(2, [c])[c]
    own = fed.runtime.contexts[c].state["params"]
    current = client.current(message, fed.runtime.contexts[c])
    ring = [server.models[(c - 1) % 4], own, server.models[(c + 1) % 4]]
    assert torch.allclose(current["reduction.bias"], sum(m["reduction.bias"] for m in ring) / 3)
