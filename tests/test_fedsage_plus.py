"""FedSage+: hiding, NeighGen targets and losses, mending, the federated generator, a smoke run.
Mechanics on Cora (METIS, 3 clients) and on toy graphs; tiny sizes so it stays fast."""

import json
import math
from dataclasses import replace

import pytest
import torch
from torch_geometric.data import Data
from torch_geometric.utils import degree, to_undirected

from graphfed.algorithms.averaging.fedsage_plus import FedSagePlusOptions
from graphfed.algorithms.averaging.fedsage_plus.client import MENDED_DATA
from graphfed.algorithms.averaging.fedsage_plus.generator import clip_counts
from graphfed.algorithms.averaging.fedsage_plus.impair import (
    greedy_feature_loss,
    hide_nodes,
    kept_nodes,
    mended_graph,
)
from graphfed.algorithms.averaging.fedsage_plus.messages import GEN
from graphfed.algorithms.registry import get_algorithm
from graphfed.config import load_config
from graphfed.data.federated import NodeClient
from graphfed.experiment import build_federation, run_experiment
from graphfed.models.by_level import build_model
from graphfed.models.gnn import ModelOptions
from graphfed.protocol import ClientContext, ClientSize, Setup
from graphfed.training.batches import PreparedNodeClient
from tests.conftest import require

TINY = ["dataset=Cora", "partition=metis", "device=cpu", "model.name=mlp_sage",
        "model.hidden=8", "num_clients=3", "algorithm=fedsage+", "fedsage+.gen_hidden=8",
        "fedsage+.fgen_hidden=[8]", "fedsage+.gen_local_steps=1"]


def _toy_graph(n=12, features=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    edges = torch.randint(0, n, (2, 3 * n), generator=g)
    edges = to_undirected(edges[:, edges[0] != edges[1]], num_nodes=n)
    masks = torch.zeros(3, n, dtype=torch.bool)
    masks[torch.randint(0, 3, (n,), generator=g), torch.arange(n)] = True
    return Data(x=torch.rand(n, features, generator=g), edge_index=edges, num_nodes=n,
                y=torch.randint(0, 3, (n,), generator=g), train_mask=masks[0], val_mask=masks[1],
                test_mask=masks[2])


@require("Cora")
def test_hiding_removes_the_portion_and_counts_the_hidden_neighbours():
    fed = build_federation(load_config(None, [*TINY, "eval_every=100"]), 0)
    graph = fed.runtime.contexts[0].data.graph
    n = graph.num_nodes
    imp = hide_nodes(graph, 0.5, 5, torch.Generator().manual_seed(1))
    assert len(imp.hidden) == int(0.5 * n) and len(imp.keep) == n - int(0.5 * n)
    assert not set(imp.hidden.tolist()) & set(imp.keep.tolist())
    assert torch.equal(imp.x, graph.x[imp.keep].float()) and torch.equal(imp.y, graph.y[imp.keep])
    # the impaired graph is the subgraph induced by the kept nodes
    full_in = degree(graph.edge_index[1], n)[imp.keep]
    kept_in = degree(imp.edge_index[1], len(imp.keep))
    assert int(imp.edge_index.max()) < len(imp.keep)
    hidden = torch.zeros(n, dtype=torch.bool)
    hidden[imp.hidden] = True
    s, t = graph.edge_index
    assert imp.edge_index.size(1) == int((~hidden[s] & ~hidden[t]).sum())
    # true missing count = full degree minus impaired degree = edges from hidden nodes
    assert torch.equal(imp.missing_count, full_in - kept_in)
    assert float(imp.missing_count.sum()) == float((hidden[s] & ~hidden[t]).sum())
    assert torch.equal(imp.missing_mask.sum(1), imp.missing_count.clamp(max=5).long())
    # the recorded features are those of actual hidden neighbours
    i = int(torch.nonzero(imp.missing_count >= 1)[0])
    node = int(imp.keep[i])
    sources = set(s[(t == node) & hidden[s]].tolist())
    assert any(torch.equal(imp.missing_x[i, 0], graph.x[u].float()) for u in sources)


def test_mended_graph_keeps_the_original_nodes_and_links_added_ones_to_their_source():
    graph = _toy_graph()
    n, slots = graph.num_nodes, 3
    counts = torch.tensor([0, 1, 2, 3, 0, 0, 1, 0, 3, 0, 2, 1])
    generated = torch.rand(n, slots, graph.x.size(1))
    mended = mended_graph(graph, counts, generated)
    added = int(counts.sum())
    assert mended.num_nodes == n + added and mended.x.size(0) == n + added
    assert torch.equal(mended.x[:n], graph.x) and torch.equal(mended.y[:n], graph.y)
    assert (mended.y[n:] == -1).all()
    for s in ("train", "val", "test"):
        mask = getattr(mended, f"{s}_mask")
        assert torch.equal(mask[:n], getattr(graph, f"{s}_mask")) and not mask[n:].any()
    # the original edges are kept; each added node has one edge each way, to its source only
    assert torch.equal(mended.edge_index[:, :graph.edge_index.size(1)], graph.edge_index)
    new = mended.edge_index[:, graph.edge_index.size(1):]
    assert new.size(1) == 2 * added
    source = mended.generated_from
    assert torch.equal(torch.bincount(source, minlength=n), counts)
    for k in range(added):
        touching = new[:, (new[0] == n + k) | (new[1] == n + k)]
        assert {tuple(e) for e in touching.t().tolist()} == {(n + k, int(source[k])),
                                                             (int(source[k]), n + k)}
    # added nodes come in source order; the j-th one added to node i has features generated[i, j]
    assert torch.equal(mended.x[n], generated[1, 0])
    assert torch.equal(mended.x[n + 1:n + 3], generated[2, :2])
    assert torch.equal(mended.x[n + 3:n + 6], generated[3, :3])


def test_predicted_counts_are_rounded_and_clipped_to_num_pred():
    counts = torch.tensor([-1.0, 0.4, 0.6, 2.5, 4.49, 7.0, 100.0])
    assert clip_counts(counts, 5).tolist() == [0, 0, 1, 2, 4, 5, 5]


def test_greedy_feature_loss_is_zero_on_the_true_neighbours_and_takes_the_closest():
    true = torch.rand(4, 3, 5)
    mask = torch.tensor([[True, True, False], [True, False, False], [False] * 3, [True] * 3])
    generated = true.clone()
    generated[0] = true[0][[1, 0, 2]]  # any order of the true neighbours matches
    generated[1, 1:] = 9.0  # slots beyond the true count are not scored
    generated[2] = 5.0  # a node with no missing neighbour is not scored
    assert float(greedy_feature_loss(generated, true, mask)) == pytest.approx(0.0, abs=1e-6)
    off = generated.clone()
    off[3, 0] = true[3, 2] + 0.5  # closest true neighbour of slot 0 is now at distance 0.25
    dist = ((off[3, 0].unsqueeze(0) - true[3]) ** 2).mean(1).min()
    expected = float(dist) / int(mask.sum())
    assert float(greedy_feature_loss(off, true, mask)) == pytest.approx(expected, rel=1e-4)


def _toy_client(cid, seed):
    graph = _toy_graph(seed=seed)
    data = PreparedNodeClient(NodeClient(graph, torch.arange(graph.num_nodes)), build_model(
        "node", graph.num_features, 3, ModelOptions(name="mlp")), torch.device("cpu"))
    return ClientContext(cid, data, {}, trainer=None)


def test_generator_is_averaged_and_identical_on_every_client_after_aggregation():
    algorithm = get_algorithm("fedsage+")
    options = FedSagePlusOptions(gen_rounds=3, gen_hidden=4, fgen_hidden=[4], num_pred=2)
    ctxs = [_toy_client(0, 1), _toy_client(1, 2)]
    setup = Setup(level="node", num_clients=2, num_classes=3,
                  initial_params={"w": torch.zeros(2)}, options=options)
    sizes = tuple(ClientSize(0, ctx.data.graph.num_nodes) for ctx in ctxs)
    server = algorithm.server(replace(setup, client_sizes=sizes))
    client = algorithm.client(setup)
    asks = server.configure_setup([0, 1])
    torch.manual_seed(0)
    replies = {c: client.answer_setup(asks[c], ctxs[c]) for c in (0, 1)}
    a, b = (replies[c].tensors for c in (0, 1))
    assert any(not torch.equal(a[k], b[k]) for k in a)  # trained on different local data
    server.aggregate_setup(replies)
    assert server.gen_done == 1
    assert all("num_samples_gen" not in m.scalars for m in replies.values())
    w = [kept_nodes(s.nodes, options.hide_portion) for s in sizes]  # the partition's, not theirs
    for k in server.gen:  # the sample-weighted FedAvg of the generators
        assert torch.allclose(server.gen[k], (w[0] * a[GEN + k] + w[1] * b[GEN + k]) / sum(w),
                              atol=1e-6)
    messages = server.configure_fit(1, [0, 1])
    sent = [{k: v for k, v in messages[c].tensors.items() if k.startswith(GEN)} for c in (0, 1)]
    assert sent[0].keys() == sent[1].keys() and sent[0]
    assert all(torch.equal(sent[0][k], sent[1][k]) for k in sent[0])
    assert all(messages[c].scalars["fedsage+_train_gen"] for c in (0, 1))
    spec, _ = server.reply_spec(0)
    assert set(spec) == {"w", *sent[0]}


@require("Cora")
def test_final_generator_mends_every_client_then_stops_travelling():
    fed = build_federation(load_config(None, [*TINY, "eval_every=100", "fedsage+.gen_rounds=1",
                                              "fedsage+.num_pred=3"]), 0)
    line = fed.setup()  # generator round 1 = the setup exchange, uploaded and counted
    assert line is not None and line["bytes_up"] > 0
    server = fed.runtime.server
    gen_bytes = sum(v.numel() * v.element_size() for v in server.gen.values())
    fed.fit_round(1)  # carries the final generator: every client mends before training
    assert server.mended == {0, 1, 2}
    for ctx in fed.runtime.contexts:
        mended = ctx.cache[MENDED_DATA]
        n = ctx.data.graph.num_nodes
        assert len(mended.x) >= n and len(mended.x) <= 4 * n
        assert torch.equal(mended.y[:n], ctx.data.y)
        for s in ("train", "val", "test"):
            assert torch.equal(mended.index[s], ctx.data.index[s])
    assert all(not k.startswith(GEN) for k in server.configure_fit(2, [0, 1, 2])[0].tensors)
    assert gen_bytes > 0
    # a resumed client (an empty cache: it is never checkpointed) rebuilds the prepared view
    ctx = fed.runtime.contexts[0]
    before = ctx.cache.pop(MENDED_DATA)
    client = fed.runtime.client
    metrics = client.evaluate(server.configure_evaluate(2, [0])[0], ctx)
    assert torch.equal(ctx.cache[MENDED_DATA].x, before.x) and "test" in metrics


def test_zero_generator_rounds_is_plain_fedsage():
    algorithm = get_algorithm("fedsage+")
    setup = Setup(level="node", num_clients=2, num_classes=3,
                  initial_params={"w": torch.zeros(2)}, options=FedSagePlusOptions(gen_rounds=0))
    server = algorithm.server(setup)
    assert server.configure_setup([0, 1]) == {}
    assert set(server.configure_fit(1, [0, 1])[0].tensors) == {"w"}


@require("Cora")
def test_fedsage_plus_runs_end_to_end(tmp_path):
    config = load_config(None, [*TINY, "rounds=2", "eval_every=1", "name=b",
                                "partition.global_test=0.2", "fedsage+.gen_rounds=2"])
    run_dir, summary = run_experiment(config, tmp_path, progress=False)
    final = summary["final"]
    assert summary["rounds"] == 2 and final["bytes_up"] > 0
    assert 0.0 <= final["test_acc"] <= 1.0 and math.isfinite(final["test_loss"])
    assert 0.0 <= final["global_test_acc"] <= 1.0
    lines = [json.loads(x) for x in (run_dir / "seed-0" / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["round"] == 0 and lines[0]["bytes_up"] > 0  # generator round 1 (setup)
    assert lines[1]["server"]["fedsage+_generator_rounds"] == 2
    assert lines[2]["server"]["fedsage+_mended_clients"] == 3
    assert lines[1]["bytes_up"] > lines[2]["bytes_up"]  # round 1 also uploads the generator
