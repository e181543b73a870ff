"""AdaFGL: step 1 is FedAvg to the bit; step 2 sends the extractor once and nothing after; the
homophily confidence score is label propagation's accuracy on held-out training labels; the
corrected propagation matrix, the signed operator and the mixed prediction; and a run with no
round left for step 2 is refused in one line, on Cora clients."""

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn.conv.gcn_conv import gcn_norm
from typer.testing import CliRunner

from graphfed.algorithms.personalized.adafgl import (
    HCS,
    NET,
    SOFT_LABELS,
    AdaFGLOptions,
    corrected_operator,
    homophily_confidence,
    homophily_weight,
    mixed_prediction,
    similarity_graph,
    step_two_loss,
)
from graphfed.cli import app
from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.models.adafgl import signed_operator
from tests.conftest import error_line, evaluated_after, require

CORA = ["dataset=Cora", "partition=metis", "num_clients=5", "device=cpu", "engine=sequential"]
STEP_ONE = 2  # extractor rounds in these tests


@pytest.fixture(scope="module")
def federation():
    """An AdaFGL federation after its two step-1 rounds and one step-2 round, the server's
    model after step 1 and the round records of both steps."""
    config = load_config(None, ["algorithm=adafgl", f"adafgl.extractor_rounds={STEP_ONE}",
                                "rounds=4", *CORA])
    fed = build_federation(config, 0)
    fed.setup()
    lines = [fed.fit_round(rnd) for rnd in range(1, STEP_ONE + 1)]
    extractor = {k: v.clone() for k, v in fed.runtime.server.params.items()}
    lines.append(fed.fit_round(STEP_ONE + 1))
    return fed, extractor, lines


@require("Cora")
def test_step_one_is_fedavg_to_the_bit():
    runtime, records = evaluated_after(["algorithm=adafgl",
                                        f"adafgl.extractor_rounds={STEP_ONE}", *CORA],
                                       rounds=STEP_ONE)
    fedavg, fedavg_records = evaluated_after(["algorithm=fedavg", *CORA], rounds=STEP_ONE)
    assert records == fedavg_records
    assert all(torch.equal(v, fedavg.server.params[k])
               for k, v in runtime.server.params.items())


@require("Cora")
def test_step_two_sends_the_extractor_once_and_nothing_leaves_a_client(federation):
    fed, extractor, lines = federation
    server = fed.runtime.server
    first = lines[STEP_ONE]  # the first step-2 round: the extractor down, nothing up
    extractor_bytes = sum(v.numel() * v.element_size() for v in extractor.values())
    assert first["dropped"] == {}
    assert first["bytes_down"] >= 5 * extractor_bytes
    assert first["bytes_up"] < lines[0]["bytes_up"] / 100
    assert server.started == set(range(5))
    assert all(torch.equal(v, extractor[k]) for k, v in server.params.items())
    later = server.configure_fit(STEP_ONE + 2, list(range(5)))
    assert all(m.tensors == {} for m in later.values())
    for ctx in fed.runtime.contexts:  # each client holds P̂ (rows sum to 1) and its HCS
        assert torch.allclose(ctx.state[SOFT_LABELS].sum(dim=1), torch.ones(len(ctx.data.y)))
        assert 0.0 <= ctx.state[HCS] <= 1.0 and NET in ctx.state


@require("Cora")
def test_a_second_step_two_round_trains_the_personal_network_only(federation):
    fed, extractor, _ = federation
    before = [{k: v.clone() for k, v in ctx.state[NET].items()} for ctx in fed.runtime.contexts]
    line = fed.fit_round(STEP_ONE + 2)
    assert line["dropped"] == {} and line["bytes_down"] < 100  # the step flags only
    assert all(torch.equal(v, extractor[k]) for k, v in fed.runtime.server.params.items())
    for old, ctx in zip(before, fed.runtime.contexts, strict=True):
        assert any(not torch.equal(v, ctx.state[NET][k]) for k, v in old.items())
    accuracy = [c["test_acc"] for c in fed.evaluate(STEP_ONE + 2)["clients"]]
    assert len(accuracy) == 5 and all(0.0 <= a <= 1.0 for a in accuracy)


@require("Cora")
def test_hcs_is_label_propagation_accuracy_on_the_held_out_training_half(federation):
    fed, _, _ = federation
    data = fed.runtime.contexts[0].data
    options = AdaFGLOptions()
    torch.manual_seed(3)
    hcs = homophily_confidence(data, 7, options)
    # the same held-out half, propagated by a dense Ã = D̃^(−1/2)(A + I)D̃^(−1/2)
    torch.manual_seed(3)
    train = data.index["train"]
    order = train[torch.randperm(len(train))]
    kept, held = order[:len(train) // 2], order[len(train) // 2:]
    n = len(data.y)
    edges, weights = gcn_norm(data.graph.edge_index, None, n, add_self_loops=True)
    a = torch.zeros(n, n, dtype=torch.float64)
    a[edges[1], edges[0]] = weights.double()
    y0 = torch.full((n, 7), 1 / 7, dtype=torch.float64)
    y0[kept] = F.one_hot(data.y[kept], 7).double()
    y = y0
    for _ in range(options.lp_steps):
        y = options.lp_alpha * a @ y + (1 - options.lp_alpha) * y0
    expected = float((y[held].argmax(dim=1) == data.y[held]).double().mean())
    assert hcs == pytest.approx(expected)
    assert hcs > 0.5  # Cora's topology is homophilous: propagation recovers most labels


@require("Cora")
def test_without_edges_hcs_is_the_held_out_share_of_the_first_class(federation):
    """No edge carries a label, so every held-out node keeps the uniform row, whose argmax is
    class 0: HCS is then no better than guessing that class."""
    fed, _, _ = federation
    data = fed.runtime.contexts[0].data
    edges = data.graph.edge_index
    data.graph.edge_index = edges[:, :0]
    try:
        torch.manual_seed(3)
        hcs = homophily_confidence(data, 7, AdaFGLOptions())
    finally:
        data.graph.edge_index = edges
    torch.manual_seed(3)
    train = data.index["train"]
    held = train[torch.randperm(len(train))][len(train) // 2:]
    assert hcs == pytest.approx(float((data.y[held] == 0).double().mean()))


@require("Cora")
def test_corrected_operator_mixes_the_topology_with_the_soft_label_graph(federation):
    fed, _, _ = federation
    ctx = fed.runtime.contexts[0]
    soft = ctx.state[SOFT_LABELS]
    s = similarity_graph(soft, 0.999)
    n = len(s)
    assert torch.equal(s, s.t()) and torch.equal(s.diagonal(), torch.zeros(n))
    assert 0 < int(s.sum()) < n * (n - 1)  # some pairs alike, not all
    edges = ctx.data.graph.edge_index
    # α = 1: GCN's normalised adjacency, the soft-label graph ignored
    looped = torch.eye(n)
    looped[edges[0], edges[1]] = 1.0
    norm = looped.sum(dim=1).rsqrt()
    gcn = norm[:, None] * looped * norm[None, :]
    assert torch.allclose(corrected_operator(edges, s, 1.0), gcn, atol=1e-6)
    # α = 0: the soft-label graph alone
    looped_s = s + torch.eye(n)
    norm_s = looped_s.sum(dim=1).rsqrt()
    assert torch.allclose(corrected_operator(edges, s, 0.0),
                          norm_s[:, None] * looped_s * norm_s[None, :], atol=1e-6)


def test_signed_operator_spans_minus_one_to_one_with_a_unit_diagonal():
    g = torch.Generator().manual_seed(0)
    r = torch.rand(40, 40, generator=g)
    r = (r + r.t()) / 2 * (1 - torch.eye(40))
    op = signed_operator(r)
    off = op[~torch.eye(40, dtype=torch.bool)]
    assert torch.equal(op.diagonal(), torch.ones(40))
    assert off.max() == pytest.approx(1.0) and off.min() >= -1.0
    above = r > r.mean()
    assert (op[above] > 0).all() and (op[~above & ~torch.eye(40, dtype=torch.bool)] <= 0).all()


def test_the_prediction_mixes_the_modules_by_hcs_or_switches():
    g = torch.Generator().manual_seed(1)
    outputs = tuple(torch.randn(30, 7, generator=g) for _ in range(4))
    soft = torch.softmax(torch.randn(30, 7, generator=g), dim=1)
    homo = (torch.softmax(outputs[0], 1) + torch.softmax(soft, 1)) / 2
    hete = sum(torch.softmax(z, 1) for z in outputs[1:]) / 3
    p = mixed_prediction(outputs, soft, 0.3)
    assert torch.allclose(p, 0.3 * homo + 0.7 * hete)
    assert torch.allclose(p.sum(dim=1), torch.ones(30))
    switch = AdaFGLOptions(combine="switch")
    assert homophily_weight(0.95, switch) == 1.0 and homophily_weight(0.85, switch) == 0.0
    assert homophily_weight(0.85, AdaFGLOptions()) == 0.85
    # a module without a share contributes no gradient
    live = [z.clone().requires_grad_(True) for z in outputs]
    y, train = torch.randint(0, 7, (30,), generator=g), torch.arange(10)
    step_two_loss(tuple(live), soft, y, train, 0.0).backward()
    assert live[0].grad is None and all(z.grad is not None for z in live[1:])


def test_a_run_without_a_step_two_round_is_refused():
    result = CliRunner().invoke(app, ["run", "algorithm=adafgl", "dataset=Cora", "rounds=20"])
    assert "extractor_rounds" in error_line(result)


def test_graph_level_is_refused():
    result = CliRunner().invoke(app, ["run", "algorithm=adafgl", "dataset=MUTAG"])
    assert "adafgl" in error_line(result)
