"""FedLit: the multi-channel GNN's reduction to a plain GNN at K = 1, the EM steps on real edges,
the server's prototype matching (a permutation of a client's channels changes nothing), its
per-channel weights, and refused backbones."""

import pytest
import torch
import torch.nn.functional as F
from torch_geometric.nn import GCNConv, SAGEConv
from typer.testing import CliRunner

from graphfed.algorithms.averaging.fedlit import CHANNEL_SAMPLES
from graphfed.cli import app
from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.mechanisms.channel_alignment import channel_weights
from graphfed.messages import Message
from graphfed.models.gnn import ModelOptions
from graphfed.models.link_type_gnn import PROTOTYPES, LinkTypeGNN, is_channel_parameter
from graphfed.models.link_types import (
    assign_link_types,
    edge_embeddings,
    kmeans_plus_plus,
    prototype_means,
)
from tests.conftest import error_line, require

CORA = ["dataset=Cora", "partition=metis", "num_clients=3", "device=cpu", "algorithm=fedlit"]


def _federation(*extra: str):
    return build_federation(load_config(None, [*CORA, *extra]), 0)


@require("Cora")
@pytest.mark.parametrize(("layer", "self_loops"), [("gcn", True), ("gcn", False),
                                                   ("sage", False)])
def test_one_link_type_is_the_plain_gnn_with_the_same_weights(layer, self_loops):
    """K = 1: projection, lift, two PyG layers (GCNConv normalised with or without self-loops;
    SAGEConv's mean), classifier. Without self-loops a node with no edge gets nothing from the
    channel (the FedLIT code's edge subgraphs), so only nodes with an edge are compared; five
    nodes lose theirs to make sure there are some without."""
    data = _federation().runtime.contexts[0].data
    x, edge_index = data.x, data.edge_index[:, (data.edge_index >= 5).all(0)]
    opts = ModelOptions(name=layer, hidden=16, layers=2, dropout=0.3)
    model = LinkTypeGNN(x.shape[1], 7, opts, link_types=1, self_loops=self_loops).eval()
    convs = [GCNConv(16, 16, add_self_loops=self_loops) if layer == "gcn" else SAGEConv(16, 16)
             for _ in range(2)]
    with torch.no_grad():
        for mine, theirs in zip(model.convs, convs, strict=True):
            linear = theirs.lin if layer == "gcn" else theirs.lin_l
            linear.weight.copy_(mine.linear.weight[0])
            (theirs.bias if layer == "gcn" else theirs.lin_l.bias).copy_(mine.linear.bias[0])
            if layer == "sage":
                theirs.lin_r.weight.copy_(mine.root.weight[0])
        h = F.linear(model.project(x), model.lift.weight[0], model.lift.bias[0])
        for conv in convs:
            h = F.relu(conv(h, edge_index))
        expected = model.classifier(h)
        got = model(x, edge_index)
    keep = (torch.ones(len(x), dtype=torch.bool) if self_loops
            else torch.bincount(edge_index[1], minlength=len(x)) > 0)
    torch.testing.assert_close(got[keep], expected[keep], rtol=1e-5, atol=1e-5)
    assert torch.equal(got[~keep], model.classifier.bias.expand(int((~keep).sum()), -1))


@require("Cora")
def test_em_steps_give_each_edge_one_type_and_prototypes_the_means_of_their_edges():
    data = _federation().runtime.contexts[1].data
    edge_index = data.edge_index
    torch.manual_seed(0)
    h = torch.nn.Linear(data.x.shape[1], 8)(data.x).detach()
    prototypes = kmeans_plus_plus(h, edge_index, 4, torch.Generator().manual_seed(0))
    embeddings = edge_embeddings(h, edge_index)
    # k-means++ picks K distinct edges' embeddings
    assert len({tuple(p.tolist()) for p in prototypes}) == 4
    assert all((embeddings == p).all(1).any() for p in prototypes)
    types = assign_link_types(h, edge_index, prototypes)
    assert types.shape == (edge_index.shape[1],) and types.dtype == torch.long
    assert int(types.min()) >= 0 and int(types.max()) < 4
    cosine = F.cosine_similarity(embeddings.unsqueeze(1), prototypes.unsqueeze(0), dim=2)
    assert torch.equal(types, cosine.argmax(1))
    # an edge and its reverse share the embedding, hence the type
    reverse = {(int(u), int(v)): int(t) for (u, v), t in zip(edge_index.T, types, strict=True)}
    assert all(reverse[(v, u)] == t for (u, v), t in reverse.items())
    means = prototype_means(h, edge_index, types, prototypes)
    for c in range(4):
        if (types == c).any():
            torch.testing.assert_close(means[c], embeddings[types == c].mean(0))
    empty = prototype_means(h, edge_index, torch.zeros_like(types), prototypes)
    assert torch.equal(empty[1:], prototypes[1:])  # a type without edges keeps its prototype


def _permuted(reply: Message, perm: torch.Tensor) -> Message:
    tensors = {k: v[perm] if is_channel_parameter(k) or k == CHANNEL_SAMPLES else v
               for k, v in reply.tensors.items()}
    return Message(tensors, dict(reply.scalars))


def _round(fed, rnd: int) -> dict[int, Message]:
    server, client, contexts = fed.runtime.server, fed.runtime.client, fed.runtime.contexts
    messages = server.configure_fit(rnd, [0, 1, 2])
    torch.manual_seed(rnd)
    return {c: client.fit(messages[c].to("cpu"), contexts[c]) for c in messages}


@require("Cora")
def test_permuting_a_clients_channels_leaves_the_aggregate_unchanged():
    """Round 1 matches clients 1 and 2 to client 0's prototypes, round 2 everyone to the global
    ones: relabelling a client's channels (weights, prototypes, counts together) must not
    change the server's model, and the matching must be what undoes it."""
    perm = torch.tensor([2, 0, 3, 1])
    for rnd, permuted_client in ((1, 1), (2, 0)):
        fed = _federation()
        server = fed.runtime.server
        if rnd == 2:
            server.aggregate_fit(1, _round(fed, 1))
        replies = _round(fed, rnd)
        state = {k: v.clone() for k, v in server.params.items()}, server.has_prototypes
        server.aggregate_fit(rnd, replies)
        plain, plain_order = server.params, server.last["channel_order"]
        server.params, server.has_prototypes = state
        server.aggregate_fit(rnd, {**replies, permuted_client: _permuted(
            replies[permuted_client], perm)})
        for name, value in plain.items():
            torch.testing.assert_close(server.params[name], value, rtol=1e-6, atol=1e-7,
                                       msg=name)
        order = torch.tensor(server.last["channel_order"][permuted_client])
        assert torch.equal(perm[order], torch.tensor(plain_order[permuted_client]))


@require("Cora")
def test_channel_weights_sum_to_one_over_the_clients_that_reached_training_nodes():
    fed = _federation()
    fed.fit_round(1)
    weights = torch.tensor(fed.runtime.server.last["channel_weights"])
    assert weights.shape == (3, 4)
    for column in weights.T:
        assert float(column.sum()) == pytest.approx(1.0) or float(column.abs().sum()) == 0.0
    counts = torch.tensor([[3, 0, 5], [1, 0, 0], [0, 0, 5]])
    uniform, samples = channel_weights(counts, "uniform"), channel_weights(counts, "samples")
    assert uniform.tolist() == [[0.5, 0.0, 0.5], [0.5, 0.0, 0.0], [0.0, 0.0, 0.5]]
    assert samples[:, 0].tolist() == [0.75, 0.25, 0.0] and samples[:, 1].tolist() == [0, 0, 0]


@require("Cora")
def test_clients_seed_prototypes_until_the_server_has_them_and_upload_the_m_step():
    fed = _federation()
    server = fed.runtime.server
    assert PROTOTYPES not in server.configure_fit(1, [0])[0].tensors
    fed.fit_round(1)
    assert PROTOTYPES in server.configure_fit(2, [0])[0].tensors
    reply = _round(fed, 2)[0]
    assert reply.tensors[CHANNEL_SAMPLES].sum() > 0
    assert not torch.equal(reply.tensors[PROTOTYPES], server.params[PROTOTYPES])


def test_fedlit_refuses_a_backbone_without_channels():
    result = CliRunner().invoke(app, ["run", "algorithm=fedlit", "dataset=Cora", "model=gat"])
    assert "fedlit takes model gcn, sage, sgc" in error_line(result)
