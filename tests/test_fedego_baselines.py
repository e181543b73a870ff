"""FedEgo's node-classification baselines: the mlp_sage model, adaptive FedProx, D-FedGNN,
FedGCN and GraphFL. Mechanics on small real data (Cora, METIS, a few clients) plus smoke runs."""

import json
import math

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from graphfed.algorithms.averaging.fedprox import (
    AdaptiveProximalTerm,
    adapt_mu,
    normalised_distance,
)
from graphfed.algorithms.averaging.graphfl import meta_gradient, support_query
from graphfed.algorithms.registry import get_algorithm
from graphfed.config import load_config
from graphfed.data.federated import NodeClient
from graphfed.experiment import build_federation, run_experiment
from graphfed.messages import Message
from graphfed.models.by_level import build_model
from graphfed.models.fedgcn import neighbour_mean
from graphfed.models.gnn import ModelOptions
from graphfed.protocol import ClientContext, Setup
from graphfed.training.batches import NodeBatch, PreparedNodeClient
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


# ---------------------------------------------------------------- FedGCN

def _toy_context(client_id, global_ids, x, edges):
    n = len(x)
    graph = Data(x=x, edge_index=to_undirected(torch.tensor(edges).t()), num_nodes=n,
                 y=torch.zeros(n, dtype=torch.long),
                 **{f"{s}_mask": torch.ones(n, dtype=torch.bool) for s in ("train", "val", "test")})
    data = PreparedNodeClient(NodeClient(graph, torch.tensor(global_ids)), build_model(
        "node", x.shape[1], 2, ModelOptions(name="mlp")), torch.device("cpu"))
    return ClientContext(client_id, data, {}, trainer=None)


@pytest.mark.parametrize("hops", [1, 2])
def test_fedgcn_features_are_neighbour_means_over_all_clients(hops):
    """Two clients share global node 2; its features must see node 1 (client A) and node 3
    (client B), as a direct D^-1 (A + I) X over the union of the clients' graphs does."""
    torch.manual_seed(0)
    x = torch.randn(5, 4)
    union = [(0, 1), (1, 2), (2, 3), (3, 4)]
    a = _toy_context(0, [0, 1, 2], x[[0, 1, 2]], [(0, 1), (1, 2)])
    b = _toy_context(1, [2, 3, 4], x[[2, 3, 4]], [(0, 1), (1, 2)])  # 2-3, 3-4 in global ids
    algorithm = get_algorithm("fedgcn")
    setup = Setup(level="node", num_clients=2, num_classes=2,
                  initial_params={"w": torch.zeros(1)}, options=algorithm.options(hops=hops))
    server, client = algorithm.server(setup), algorithm.client(setup)
    asks = server.configure_setup([0, 1])
    server.aggregate_setup({c: client.answer_setup(asks[c], ctx) for c, ctx in enumerate((a, b))})
    messages = server.configure_fit(1, [0, 1])
    edge_index = to_undirected(torch.tensor(union).t())
    expected = neighbour_mean(x, edge_index, 5)  # the first hop over the union graph
    for c, ctx in enumerate((a, b)):
        stripped, view = client.view(messages[c], ctx)
        assert set(stripped.tensors) == {"w"}
        own = ctx.data.global_ids
        want = expected[own]
        if hops == 2:  # the second hop over the client's own edges
            want = neighbour_mean(want, ctx.data.graph.edge_index, len(own))
        assert torch.allclose(view.data.x, want, atol=1e-6)
    # node 2 really gained: its local mean in client A differs from the global one
    assert not torch.allclose(neighbour_mean(a.data.graph.x, a.data.graph.edge_index, 3)[2],
                              expected[2])
    server.aggregate_fit(1, {0: Message({"w": torch.ones(1)}, {"num_samples": 1,
                                                               "fedgcn_ready": True})})
    assert set(server.configure_fit(2, [0, 1])[0].tensors) == {"w"}  # sent once
    assert "fedgcn_features.sums" in server.configure_fit(2, [0, 1])[1].tensors


@require("Cora")
def test_fedgcn_on_a_disjoint_partition_equals_local_aggregation():
    """METIS clients share no node and have lost their cross edges: the exchanged features are
    exactly the model's local hop means (what prepare gives every graph, the global test too)."""
    fed = _federation("algorithm=fedgcn", "fedgcn.hops=2", "model.name=gcn")
    line = fed.setup()
    assert line is not None and line["bytes_up"] > 0
    fed.fit_round(1)
    for ctx in fed.runtime.contexts:
        assert torch.allclose(ctx.state["fedgcn_features"], ctx.data.x, atol=1e-5)
    assert fed.runtime.server.ready == {0, 1, 2}


@require("Cora")
def test_fedgcn_with_zero_hops_is_fedavg_of_the_same_gcn():
    common = ["model.name=gcn", "model.layers=2", "rounds=2"]
    gcn = _federation("algorithm=fedgcn", "fedgcn.hops=0", *common)
    assert gcn.setup() is None
    for rnd in (1, 2):
        gcn.fit_round(rnd)
    avg = _federation("algorithm=fedavg", *common)  # reseeds: the same RNG stream
    for rnd in (1, 2):
        avg.fit_round(rnd)
    ours, theirs = gcn.runtime.server.global_params(), avg.runtime.server.global_params()
    assert set(ours) == set(theirs)
    for k in ours:
        assert torch.allclose(ours[k], theirs[k], atol=1e-6), k


# ---------------------------------------------------------------- GraphFL

def test_support_and_query_are_disjoint_with_the_asked_sizes():
    index = torch.arange(100, 400)
    support, query = support_query(index, 80, 80)
    assert len(support) == 80 and len(query) == 80
    assert not set(support.tolist()) & set(query.tolist())
    assert set(support.tolist()) | set(query.tolist()) <= set(index.tolist())
    support, query = support_query(torch.arange(50), 80, 80)  # too few: shrink in proportion
    assert len(support) == 25 and len(query) == 25
    assert not set(support.tolist()) & set(query.tolist())


@require("Cora")
def test_graphfl_meta_gradient_is_the_query_gradient_at_the_adapted_weights():
    fed = _federation("algorithm=graphfl", "model.dropout=0")
    trainer, data = fed.trainer, fed.runtime.contexts[0].data
    params = trainer.initial_params()
    trainer.model.train()
    support, query = support_query(data.index["train"], 80, 80)

    def grad_at(p, nodes):
        live = {k: v.clone().requires_grad_(True) for k, v in p.items()}
        batch = NodeBatch(data.x, data.edge_index, data.edge_weight, data.y, nodes)
        loss = torch.nn.functional.cross_entropy(trainer.forward(live, batch), batch.targets)
        return dict(zip(live, torch.autograd.grad(loss, list(live.values())), strict=True))

    # inner step by hand, then the query gradient there (first order)
    g = grad_at(params, support)
    adapted = {k: v - 0.1 * g[k] for k, v in params.items()}
    want = grad_at(adapted, query)
    meta, _ = meta_gradient(trainer, params, data, support, query, 0.1, 1, first_order=True)
    for k in params:
        assert torch.allclose(meta[k], want[k], atol=1e-6), k
    # second order differs (it differentiates through the inner step) but agrees in size
    second, _ = meta_gradient(trainer, params, data, support, query, 0.1, 1, first_order=False)
    assert any(not torch.allclose(second[k], meta[k]) for k in params)
    assert all(second[k].shape == meta[k].shape for k in params)


@require("Cora")
def test_graphfl_client_applies_the_meta_gradient_and_evaluation_fine_tunes():
    fed = _federation("algorithm=graphfl", "model.dropout=0", "optimizer.name=sgd",
                      "optimizer.lr=0.5", "optimizer.weight_decay=0", "graphfl.inner_lr=0.1")
    client, ctx = fed.runtime.client, fed.runtime.contexts[0]
    params = fed.trainer.initial_params()
    torch.manual_seed(3)
    reply = client.fit(Message(tensors=params), ctx)
    torch.manual_seed(3)  # the same support/query draw
    support, query = support_query(ctx.data.index["train"], 80, 80)
    meta, _ = meta_gradient(fed.trainer, params, ctx.data, support, query, 0.1)
    for k, v in params.items():  # one SGD meta-step of size 0.5
        assert torch.allclose(reply.tensors[k], v - 0.5 * meta[k], atol=1e-5), k
    tuned = client.evaluate(Message(tensors=params), ctx)
    plain = client.evaluate_params(params, ctx)
    assert tuned["test"]["loss"] != plain["test"]["loss"]  # fine-tuned before testing


# ---------------------------------------------------------------- end to end

@require("Cora")
@pytest.mark.parametrize("method", ["d-fedgnn", "fedgcn", "graphfl", "fedprox"])
def test_baselines_run_end_to_end(tmp_path, method):
    extra = ["fedprox.adaptive=true"] if method == "fedprox" else []
    config = load_config(None, [*SMALL, "num_clients=3", f"algorithm={method}", "rounds=2",
                                "eval_every=1", "name=b", "partition.global_test=0.2", *extra])
    run_dir, summary = run_experiment(config, tmp_path, progress=False)
    final = summary["final"]
    assert summary["rounds"] == 2 and final["bytes_up"] > 0
    assert 0.0 <= final["test_acc"] <= 1.0 and math.isfinite(final["test_loss"])
    assert ("global_test_acc" in final) == (method != "d-fedgnn")  # D-FedGNN: no global model
    first = json.loads((run_dir / "seed-0" / "metrics.jsonl").read_text().splitlines()[0])
    assert (first["round"] == 0) == (method == "fedgcn")  # only FedGCN has a setup exchange
