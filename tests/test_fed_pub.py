"""FED-PUB: the personalised aggregation weights on made-up embeddings, the masked GCN against
a plain GCN, the local regulariser's gradients, and short real runs on Cora (metis, 3 clients,
2 rounds): what crosses the boundary, its bytes, the kept masks, the global model."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.data import Data
from torch_geometric.nn import GCNConv

from graphfed.algorithms.personalized.fed_pub import (
    EMBEDDING,
    PROXY_SEED,
    FedPubOptions,
    FedPubServer,
    local_regulariser,
    proxy_graph,
)
from graphfed.config import load_config
from graphfed.errors import GraphfedError
from graphfed.experiment import build_federation
from graphfed.mechanisms.client_network import stack
from graphfed.messages import Message, MessageError, check_message
from graphfed.models.masked_gcn import MaskedGCN, is_mask, weights_only
from graphfed.protocol import Setup
from tests.conftest import require

CLIENTS = 3
OVERRIDES = ["algorithm=fed-pub", "dataset=Cora", "partition=metis", f"num_clients={CLIENTS}",
             "device=cpu", "partition.global_test=0.2"]


def _params() -> dict[str, torch.Tensor]:
    """A tiny masked model's parameters: conv2 of width 2 (the embedding's)."""
    return dict(MaskedGCN(3, 2, 2, 0.0).named_parameters())


def _server(**options) -> FedPubServer:
    params = {k: v.detach() for k, v in _params().items()}
    setup = Setup(level="node", num_clients=CLIENTS, num_classes=2, initial_params=params,
                  options=FedPubOptions(**options))
    return FedPubServer(setup)


def _replies(server: FedPubServer, embeddings: list[list[float]], sizes: list[int],
             seed: int = 0) -> tuple[dict[int, Message], list[dict]]:
    g = torch.Generator().manual_seed(seed)
    models = [{k: torch.randn(v.shape, generator=g) for k, v in
               server.setup.initial_params.items()} for _ in embeddings]
    replies = {c: Message({**m, EMBEDDING: torch.tensor(e)}, {"num_samples": n})
               for c, (m, e, n) in enumerate(zip(models, embeddings, sizes, strict=True))}
    return replies, models


# ------------------------------------------------------------------ server, hand-made cases

def test_weights_are_row_normalised_exp_of_scaled_cosines():
    server = _server(norm_scale=10.0)
    embeddings = [[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]]  # unit rows: cos = their dot products
    replies, _ = _replies(server, embeddings, [10, 20, 30])
    server.aggregate_fit(1, replies)
    w = torch.tensor(server.round_metrics()["weights"], dtype=torch.float64)
    cos = [[1.0, 0.8, 0.0], [0.8, 1.0, 0.6], [0.0, 0.6, 1.0]]
    for i, row in enumerate(cos):
        expected = [math.exp(10 * c) / sum(math.exp(10 * d) for d in row) for c in row]
        assert w[i].tolist() == pytest.approx(expected, rel=1e-6)  # float32 embeddings
    assert (w >= 0).all() and torch.allclose(w.sum(1), torch.ones(3, dtype=torch.float64))
    assert w[0, 1] > w[0, 2]  # client 1 is more like client 0 than client 2 is
    assert w[2, 1] > w[2, 0]


def test_personalised_weights_mix_the_models_without_masks_and_ignore_sizes():
    server = _server()
    replies, models = _replies(server, [[1.0, 0.0], [0.8, 0.6], [0.0, 1.0]], [1, 50, 1000])
    server.aggregate_fit(1, replies)
    w = torch.tensor(server.round_metrics()["weights"], dtype=torch.float64)
    shared = list(weights_only(models[0]))
    flat = stack(models, shared)
    for c in range(CLIENTS):
        sent = server.configure_fit(2, [c])[c].tensors
        assert sorted(sent) == sorted(shared)  # no masks, no embedding
        assert torch.allclose(stack([sent], shared)[0], w[c] @ flat, atol=1e-6)


def test_identical_embeddings_give_every_client_the_plain_mean():
    server = _server()
    replies, models = _replies(server, [[0.3, -0.2]] * CLIENTS, [5, 10, 85])
    server.aggregate_fit(1, replies)
    w = torch.tensor(server.round_metrics()["weights"], dtype=torch.float64)
    assert torch.allclose(w, torch.full((3, 3), 1 / 3, dtype=torch.float64))
    mean = stack(models).mean(0)
    for c in range(CLIENTS):
        sent = server.configure_fit(2, [c])[c].tensors
        names = list(sent)
        assert torch.allclose(stack([sent], names)[0], stack(models, names).mean(0), atol=1e-6)
    # the global model: the plain mean (the code's train_size is 1) or weighted by size
    assert torch.allclose(stack([server.global_params()])[0], mean, atol=1e-6)
    sized = _server(global_weights="train_size")
    sized.aggregate_fit(1, replies)
    share = torch.tensor([5, 10, 85], dtype=torch.float64) / 100
    assert torch.allclose(stack([sized.global_params()])[0], share @ stack(models), atol=1e-6)


def test_before_any_round_nothing_is_sent_then_newcomers_get_the_global_weights():
    server = _server()
    assert server.configure_fit(1, [0, 1, 2]) == {c: Message() for c in range(3)}
    replies, _ = _replies(server, [[1.0, 0.0], [0.0, 1.0]], [1, 1])  # client 2 did not reply
    server.aggregate_fit(1, replies)
    sent = server.configure_fit(2, [2])[2].tensors
    assert sent.keys() == weights_only(server.global_model).keys()
    assert all(torch.equal(sent[k], server.global_model[k]) for k in sent)
    assert server.configure_evaluate(2, [0])[0] == Message()  # evaluate=trained
    aggregated = _server(evaluate="aggregated")
    aggregated.aggregate_fit(1, replies)
    assert aggregated.configure_evaluate(2, [0])[0].tensors.keys() == sent.keys()


def test_reply_check_refuses_a_bad_embedding():
    server = _server()
    spec, scalars = server.reply_spec(0)
    good = _replies(server, [[1.0, 0.0]], [1])[0][0]
    check_message(good, spec, scalars)
    for bad in (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, 0.0, 0.0]),
                torch.tensor([1.0, 0.0], dtype=torch.float64)):
        reply = Message({**good.tensors, EMBEDDING: bad}, dict(good.scalars))
        with pytest.raises(MessageError, match=EMBEDDING):
            check_message(reply, spec, scalars)


# ------------------------------------------------------------------ model and local loss

def _small_graph() -> Data:
    g = torch.Generator().manual_seed(1)
    edges = torch.tensor([[0, 1, 1, 2, 3, 4, 2, 5], [1, 0, 2, 1, 4, 3, 5, 2]])
    return Data(x=torch.randn(6, 5, generator=g), edge_index=edges, num_nodes=6)


def test_all_one_masks_give_a_plain_gcn_and_small_masks_are_pruned_in_eval():
    torch.manual_seed(0)
    model = MaskedGCN(5, 4, 3, dropout_p=0.5, prune_threshold=1e-3).eval()
    graph = _small_graph()
    prepared = model.prepare(graph)
    conv1, conv2 = GCNConv(5, 4), GCNConv(4, 4)
    with torch.no_grad():
        for plain, masked in ((conv1, model.conv1), (conv2, model.conv2)):
            plain.lin.weight.copy_(masked.weight)
            plain.bias.copy_(masked.bias)

    def plain_gcn(classifier_weight):
        hidden = conv2(F.relu(conv1(graph.x, graph.edge_index)), graph.edge_index)
        return hidden, F.linear(F.relu(hidden), classifier_weight, model.classifier.bias)

    hidden, logits = plain_gcn(model.classifier.weight)
    args = (prepared.x, prepared.edge_index, prepared.edge_weight)
    assert torch.allclose(model(*args), logits, atol=1e-6)
    assert torch.allclose(model(*args, hidden=True), hidden, atol=1e-6)
    with torch.no_grad():
        model.classifier.mask[0, :2] = 1e-4  # below the threshold: cut in eval
        model.classifier.mask[1, 0] = 0.5
    raw = model.classifier.weight * model.classifier.mask
    pruned = raw.masked_fill(model.classifier.mask < 1e-3, 0.0)
    assert torch.allclose(model(*args), plain_gcn(pruned)[1], atol=1e-6)
    assert not torch.allclose(model(*args), plain_gcn(raw)[1], atol=1e-6)
    assert torch.equal(model.train().classifier.masked(), raw)  # training sees the raw masks


def test_regulariser_gradients_l1_on_masks_and_the_pull_per_tensor():
    g = torch.Generator().manual_seed(2)
    params = {k: torch.randn(v.shape, generator=g) for k, v in _params().items()}
    anchor = {k: v + 0.1 * torch.randn(v.shape, generator=g)
              for k, v in weights_only(params).items()}
    anchor["conv2.bias"] = params["conv2.bias"].clone()  # a tensor at its anchor: gradient 0
    for proximal in ("norm", "squared"):
        live = {k: v.clone().requires_grad_(True) for k, v in params.items()}
        options = FedPubOptions(l1=0.01, loc_l2=0.1, proximal=proximal)
        local_regulariser(options, anchor)(live).backward()
        for k, v in live.items():
            if is_mask(k):
                expected = 0.01 * params[k].sign()
            else:
                gap = params[k] - anchor[k]
                norm = gap.norm()
                expected = 0.1 * (2 * gap if proximal == "squared"
                                  else (gap / norm if norm > 0 else torch.zeros_like(gap)))
            assert torch.allclose(v.grad, expected, atol=1e-7), (proximal, k)
    # no pull before the client was sent weights; nothing at all with both terms off
    live = {k: v.clone().requires_grad_(True) for k, v in params.items()}
    local_regulariser(FedPubOptions(), None)(live).backward()
    assert all(live[k].grad is None for k in weights_only(live))
    assert local_regulariser(FedPubOptions(l1=0.0), None) is None
    assert local_regulariser(FedPubOptions(l1=0.0, loc_l2=0.0), anchor) is None


def test_proxy_graph_is_five_separate_communities_fixed_by_its_seed():
    graph = proxy_graph(7, 11, 5)
    assert graph.x.shape == (500, 11) and graph.num_nodes == 500
    source, target = graph.edge_index
    assert torch.equal(source // 100, target // 100)  # p_out = 0
    density = graph.edge_index.shape[1] / 2 / (5 * 100 * 99 / 2)
    assert 0.08 < density < 0.12  # p_in = 0.1
    again, other = proxy_graph(7, 11, 5), proxy_graph(8, 11, 5)
    assert torch.equal(graph.x, again.x) and torch.equal(graph.edge_index, again.edge_index)
    assert not torch.equal(graph.x, other.x)


# ------------------------------------------------------------------ real runs on Cora

@pytest.fixture(scope="module")
def run():
    """A federation after its setup and two rounds, and what it recorded."""
    fed = build_federation(load_config(None, OVERRIDES), 0)
    lines = [fed.setup(), fed.fit_round(1), fed.fit_round(2)]
    masks = [{k: v.clone() for k, v in ctx.state["params"].items() if is_mask(k)}
             for ctx in fed.runtime.contexts]
    lines.append(fed.evaluate(2))
    return fed, lines, masks


@require("Cora")
def test_bytes_count_the_seed_the_models_and_the_embedding(run):
    fed, lines, _ = run
    params = fed.runtime.server.setup.initial_params
    model_bytes = sum(v.numel() * v.element_size() for v in params.values())
    weight_bytes = sum(v.numel() * v.element_size() for v in weights_only(params).values())
    hidden = params["conv2.bias"].numel()
    assert (lines[0]["bytes_down"], lines[0]["bytes_up"]) == (CLIENTS * 8, 0)  # the seed
    for line in lines[1:3]:  # model + masks, the embedding, num_samples and train_loss
        assert line["bytes_up"] == CLIENTS * (model_bytes + 4 * hidden + 2 * 8)
    assert lines[1]["bytes_down"] == 0
    assert lines[2]["bytes_down"] == CLIENTS * weight_bytes


@require("Cora")
def test_real_weights_are_stochastic_rows_and_clients_keep_their_masks(run):
    fed, lines, masks = run
    for line in lines[1:3]:
        w = torch.tensor(line["server"]["weights"], dtype=torch.float64)
        assert w.shape == (CLIENTS, CLIENTS) and (w >= 0).all()
        assert torch.allclose(w.sum(1), torch.ones(CLIENTS, dtype=torch.float64))
        assert (w.diagonal() >= w.max(1).values).all()  # cos = 1 with itself
    server, client = fed.runtime.server, fed.runtime.client
    ctx = fed.runtime.contexts[0]
    received = client.receive(ctx.state["params"], server.pending(0), ctx)
    for k, v in received.items():
        expected = masks[0][k] if is_mask(k) else server.outbox[0][k]
        assert torch.equal(v, expected), k
    assert not torch.equal(masks[0]["conv1.mask"], masks[1]["conv1.mask"])  # personal masks


@require("Cora")
def test_embedding_is_the_mean_conv2_output_on_the_shared_proxy(run):
    fed, _, _ = run
    client = fed.runtime.client
    contexts = fed.runtime.contexts
    seeds = {ctx.state[PROXY_SEED] for ctx in contexts}
    assert len(seeds) == 1
    ctx = contexts[0]
    params = ctx.state["params"]
    graph = proxy_graph(seeds.pop(), ctx.data.x.shape[1], 5)
    model = MaskedGCN(ctx.data.x.shape[1], params["conv2.bias"].numel(),
                      params["classifier.bias"].numel(), 0.5).eval()
    with torch.no_grad():
        model.load_state_dict(params)
        prepared = model.prepare(graph)
        expected = model(prepared.x, prepared.edge_index, prepared.edge_weight,
                         hidden=True).mean(0)
    assert torch.allclose(client.functional_embedding(params, ctx), expected, atol=1e-6)


@require("Cora")
def test_clients_evaluate_what_they_trained_and_the_global_model_is_reported(run):
    fed, lines, _ = run
    evaluation = lines[-1]
    assert 0.0 <= evaluation["global_test_acc"] <= 1.0
    for ctx, record in zip(fed.runtime.contexts, evaluation["clients"], strict=True):
        expected = ctx.trainer.evaluate(ctx.state["params"], ctx.data)["test"]["loss"]
        assert record["test_loss"] == expected


@require("Cora")
def test_a_client_without_the_setup_seed_says_so(run):
    fed, _, _ = run
    ctx = fed.runtime.contexts[0]
    seed = ctx.state.pop(PROXY_SEED)
    cached = ctx.cache.pop("proxy")
    try:
        with pytest.raises(GraphfedError, match="no proxy seed"):
            fed.runtime.client.proxy(ctx)
    finally:
        ctx.state[PROXY_SEED], ctx.cache["proxy"] = seed, cached
