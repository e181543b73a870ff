"""FGGP: FINCH keeps one prototype per group of alike client prototypes, the server's clustered
prototypes are cluster means of the clients' uploads, the kNN view adds edges to the local
graph, nodes are classified by their nearest clustered prototype, the two contrasts pull the
right way, and configurations it cannot run are refused in one line, on Cora."""

import pytest
import torch
from typer.testing import CliRunner

from graphfed.algorithms.averaging.fggp import (
    LABELS,
    PROTOTYPES,
    WEIGHTS,
    cluster_contrast,
    prototype_alignment,
    prototype_scores,
    split_message,
)
from graphfed.cli import app
from graphfed.mechanisms.finch import finch
from tests.conftest import error_line, evaluated_after, require

CORA = ["dataset=Cora", "partition=metis", "num_clients=4", "device=cpu", "local_epochs=2"]


@pytest.fixture(scope="module")
def federation():
    """Two rounds of FGGP, and every client's reply to the round-3 message."""
    runtime, records = evaluated_after(["algorithm=fggp", *CORA], rounds=2)
    message = runtime.server.configure_fit(3, [0])[0]
    replies = {c: runtime.client.fit(message, runtime.contexts[c]) for c in range(4)}
    return runtime, records, message, replies


@require("Cora")
def test_finch_groups_the_client_prototypes_of_alike_domains(federation):
    """The clients' class-0 prototypes and their negatives (another domain, opposite in
    cosine): FINCH never puts a prototype and a negative together, so it keeps at least the
    two domains; a single prototype is its own cluster."""
    _, _, _, replies = federation
    points = torch.stack([replies[c].tensors[PROTOTYPES][0] for c in range(4)])
    labels = finch(torch.cat([points, -points]))
    assert set(labels[:4].tolist()).isdisjoint(labels[4:].tolist())
    assert int(labels.max()) + 1 >= 2
    assert finch(points[:1]).tolist() == [0]


@require("Cora")
def test_server_prototypes_are_means_of_clusters_of_the_client_prototypes(federation):
    """Per class, the clustered prototypes are the means of the FINCH clusters of the clients'
    prototypes of that class: as many as clusters, and, weighted by cluster size, averaging
    to the mean of the clients' prototypes."""
    runtime, _, _, replies = federation
    server = runtime.server
    prototypes, labels = server.cluster([replies[c] for c in range(4)])
    for k in range(7):
        held = torch.stack([replies[c].tensors[PROTOTYPES][k] for c in range(4)
                            if replies[c].tensors[WEIGHTS][k] > 0])
        groups = finch(held)
        mine = prototypes[labels == k]
        assert len(mine) == int(groups.max()) + 1 <= len(held)
        sizes = torch.bincount(groups).double().view(-1, 1)
        assert torch.allclose((mine.double() * sizes).sum(0) / len(held),
                              held.double().mean(0), atol=1e-5)


@require("Cora")
def test_uploaded_weights_count_training_nodes_fully_and_others_by_confidence(federation):
    """Each class's weight lies between its training nodes (weight 1 each) and that plus every
    other node: the others count with a probability in (0, 1]."""
    runtime, _, _, replies = federation
    for c, reply in replies.items():
        data = runtime.contexts[c].data
        train = torch.bincount(data.y[data.index["train"]], minlength=7).float()
        weights = reply.tensors[WEIGHTS]
        others = len(data.y) - len(data.index["train"])
        assert bool((weights >= train - 1e-4).all())
        assert float(weights.sum()) <= float(train.sum()) + others + 1e-3
        assert float(weights.sum()) > float(train.sum())


@require("Cora")
def test_the_knn_view_keeps_the_graph_and_adds_k_neighbours_per_node(federation):
    runtime, _, message, _ = federation
    client, ctx = runtime.client, runtime.contexts[0]
    params, _, _ = split_message(message)
    _, h = client.represent(params, ctx, ctx.node_data())
    view = client.second_view(h, ctx)
    graph = ctx.node_data().graph
    old = set(map(tuple, graph.edge_index.t().tolist()))
    new = set(map(tuple, view.graph.edge_index.t().tolist()))
    n, k = graph.num_nodes, client.options.neighbours
    assert old < new
    assert len(new - old) <= 2 * n * k
    out_degree = torch.bincount(view.graph.edge_index[0], minlength=n)
    assert int(out_degree.min()) >= k


@require("Cora")
def test_nodes_are_classified_by_their_nearest_clustered_prototype(federation):
    runtime, records, message, _ = federation
    client, ctx = runtime.client, runtime.contexts[0]
    params, prototypes, labels = split_message(message)
    assert prototypes is not None and labels is not None
    _, h = client.represent(params, ctx, ctx.node_data())
    scores = prototype_scores(h, prototypes, labels, 7)
    cosine = torch.nn.functional.normalize(h, dim=1) @ torch.nn.functional.normalize(
        prototypes, dim=1).t()
    assert torch.equal(scores.argmax(1), labels[cosine.argmax(1)])
    assert all(0.4 < r["test_acc"] <= 1.0 for r in records), records


@require("Cora")
def test_the_contrasts_fall_as_views_agree_and_nodes_near_their_prototypes(federation):
    """L_PA is lower for two identical prototype sets than for one with its classes swapped;
    L_CPC falls when each node moves halfway to its class's first clustered prototype."""
    runtime, _, message, replies = federation
    own = replies[0].tensors[PROTOTYPES]
    swapped = own[torch.roll(torch.arange(7), 1)]
    assert prototype_alignment(own, own, 0.5) < prototype_alignment(own, swapped, 0.5)
    _, prototypes, labels = split_message(message)
    assert prototypes is not None and labels is not None
    ctx = runtime.contexts[0]
    _, h = runtime.client.represent(split_message(message)[0], ctx, ctx.node_data())
    targets = ctx.node_data().y
    nearest = prototypes[torch.stack([torch.nonzero(labels == t)[0, 0] for t in targets])]
    before = cluster_contrast(h, targets, prototypes, labels, 0.02)
    after = cluster_contrast(0.5 * (h + nearest), targets, prototypes, labels, 0.02)
    assert after < before


@require("Cora")
def test_the_first_round_sends_no_prototypes_then_every_class_has_some(federation):
    runtime, _, message, _ = federation
    fresh = type(runtime.server)(runtime.server.setup).configure_fit(1, [0])[0]
    assert PROTOTYPES not in fresh.tensors and LABELS not in fresh.tensors
    assert set(message.tensors[LABELS].tolist()) == set(range(7))


@pytest.mark.parametrize("override, words", [("model=sgc", "hidden layer"),
                                             ("sampling.fanouts=[5,5]", "sampling.fanouts")])
def test_a_run_it_cannot_do_is_refused_in_one_line(override, words):
    result = CliRunner().invoke(app, ["run", "algorithm=fggp", "dataset=Cora", override])
    assert words in error_line(result)


def test_graph_level_datasets_are_refused_in_one_line():
    result = CliRunner().invoke(app, ["run", "algorithm=fggp", "dataset=MUTAG"])
    assert "fggp" in error_line(result)
