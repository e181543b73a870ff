"""FedStar: structure encodings, the dual-channel model, sharing only the structure channel."""

import io
import math

import pytest
import torch
from torch_geometric.data import Batch, Data

from graphfed.algorithms.personalized.fedstar import FedStarServer
from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.messages import fit_scalars
from graphfed.models.gnn import ModelOptions
from graphfed.models.structure import (
    DualChannelGIN,
    degree_encoding,
    random_walk_encoding,
    structure_encoding,
)
from graphfed.serialization import safe_load
from tests.conftest import require

OVERRIDES = ["dataset=PROTEINS", "algorithm=fedstar", "partition=gcfl_chunk",
             "partition.global_test=0.1", "num_clients=10", "batch_size=128",
             "optimizer.lr=0.001", "model.hidden=64", "model.layers=3", "device=cpu",
             "rounds=3"]


def _undirected(pairs):
    edges = torch.tensor(pairs, dtype=torch.long).t()
    return torch.cat([edges, edges.flip(0)], dim=1)


def _reference_rw(edge_index, num_nodes, steps=16):
    """FedStar's formula, written independently: diagonals of (A D^-1)^k, dense, float64."""
    adj = torch.zeros(num_nodes, num_nodes, dtype=torch.float64)
    adj[edge_index[0], edge_index[1]] = 1.0
    deg = adj.sum(1)
    inv = torch.where(deg > 0, 1.0 / deg.clamp(min=1), torch.zeros_like(deg))
    walk = adj * inv.view(1, -1)
    power, out = walk, []
    for _ in range(steps):
        out.append(power.diagonal().clone())
        power = power @ walk
    return torch.stack(out, dim=1)


def test_triangle_return_probabilities():
    """On a triangle P = (J - I)/2 with eigenvalues 1, -1/2, -1/2: diag(P^k) = (1 + 2(-1/2)^k)/3,
    so 0 after one step, 1/2 after two, 1/4 after three."""
    rw = random_walk_encoding(_undirected([(0, 1), (1, 2), (0, 2)]), 3)
    expected = torch.tensor([(1 + 2 * (-0.5) ** k) / 3 for k in range(1, 17)])
    assert rw.shape == (3, 16)
    assert torch.allclose(rw, expected.expand(3, 16), atol=1e-6)
    assert rw[0, :3].tolist() == pytest.approx([0.0, 0.5, 0.25])


def test_path_isolated_node_and_degree_clipping():
    """Path 0-1-2, isolated node 3, star centre 4 with 20 leaves (nodes 5..24)."""
    pairs = [(0, 1), (1, 2)] + [(4, leaf) for leaf in range(5, 25)]
    edge_index = _undirected(pairs)
    rw = random_walk_encoding(edge_index, 25)
    even = torch.arange(16) % 2 == 1  # column k-1 holds step k
    assert torch.allclose(rw[0, even], torch.full((8,), 0.5))  # end: back after 2 steps w.p. 1/2
    assert torch.allclose(rw[1, even], torch.ones(8))  # middle: always back after an even walk
    assert rw[:3, ~even].abs().max() == 0  # bipartite: never back after an odd walk
    assert rw[3].abs().max() == 0  # no edges, no walk
    deg = degree_encoding(edge_index, 25)
    assert deg.sum(1).tolist() == [1.0] * 25
    assert deg.argmax(1)[:5].tolist() == [0, 1, 0, 0, 15]  # degree 1, 2, 1, 0 -> 1, 20 -> 16
    assert torch.equal(structure_encoding(edge_index, 25), torch.cat([rw, deg], dim=1))


def test_long_cycle_uses_the_sparse_path():
    """A 2100-node cycle (PyG's sparse branch above 2000 nodes): returns after k steps are the
    balanced walks, C(k, k/2) / 2^k for even k and 0 for odd k."""
    n = 2100
    rw = random_walk_encoding(_undirected([(i, (i + 1) % n) for i in range(n)]), n)
    expected = torch.tensor([math.comb(k, k // 2) / 2 ** k if k % 2 == 0 else 0.0
                             for k in range(1, 17)])
    assert torch.allclose(rw, expected.expand(n, 16), atol=1e-6)


@require("PROTEINS")
def test_collated_batch_equals_per_graph_and_fedstar_formula(proteins):
    graphs = [proteins.graphs[i] for i in range(0, len(proteins.graphs), 23)]
    batch = Batch.from_data_list(graphs)
    together = structure_encoding(batch.edge_index, batch.num_nodes, batch.batch)
    alone = torch.cat([structure_encoding(g.edge_index, g.num_nodes) for g in graphs])
    assert torch.equal(together, alone)
    rows = torch.split(together[:, :16], [g.num_nodes for g in graphs])
    for g, rw in zip(graphs[:12], rows[:12], strict=True):
        assert torch.allclose(rw.double(), _reference_rw(g.edge_index, g.num_nodes), atol=1e-5)
    # the model's prepare appends the same columns to x
    model = DualChannelGIN(graphs[0].num_features, 2, ModelOptions(name="gin", layers=3))
    prepared = model.prepare(batch)
    assert torch.equal(prepared.x[:, :graphs[0].num_features], batch.x)
    assert torch.equal(prepared.x[:, graphs[0].num_features:], together)
    # and its forward does not depend on how the graphs are batched
    model.eval()
    logits = model(prepared.x, prepared.edge_index, batch.batch, batch.num_graphs)
    for i in (0, 5, 17):
        one = model.prepare(Batch.from_data_list([graphs[i]]))
        single = model(one.x, one.edge_index, torch.zeros(one.num_nodes, dtype=torch.long), 1)
        assert torch.allclose(single[0], logits[i], atol=1e-5)


def test_model_needs_the_encoding_columns():
    model = DualChannelGIN(3, 2, ModelOptions(name="gin", layers=2))
    graph = Data(x=torch.randn(3, 3), edge_index=_undirected([(0, 1), (1, 2)]))
    with pytest.raises(ValueError, match="structure encoding"):
        model(graph.x, graph.edge_index, torch.zeros(3, dtype=torch.long), 1)
    prepared = model.prepare(graph)
    assert prepared.x.shape == (3, 3 + 32)
    assert model(prepared.x, prepared.edge_index, torch.zeros(3, dtype=torch.long), 1).shape \
        == (1, 2)


def _federation(*extra):
    return build_federation(load_config(None, [*OVERRIDES, *extra]), 0)


def _structure(params):
    return {k: v for k, v in params.items() if k.startswith("structure.")}


@require("PROTEINS")
def test_prepared_clients_carry_per_graph_encodings():
    fed = _federation()
    in_dim = fed.data.num_features
    ctx = fed.runtime.contexts[3]
    graphs = fed.data.clients[3].graphs["train"]
    expected = torch.cat([structure_encoding(g.edge_index, g.num_nodes) for g in graphs])
    assert torch.equal(ctx.data.splits["train"].x[:, in_dim:], expected)
    # a mini-batch slice keeps each graph's encoding rows
    ids = torch.tensor([4, 0, 9])
    part = ctx.data.splits["train"].take(ids)
    sliced = torch.cat([structure_encoding(graphs[i].edge_index, graphs[i].num_nodes)
                        for i in sorted(ids.tolist())])
    assert torch.equal(part.x[:, in_dim:], sliced)


@require("PROTEINS")
def test_round_shares_only_the_structure_channel():
    fed = _federation()
    server, client = fed.runtime.server, fed.runtime.client
    names = sorted(_structure(server.setup.initial_params))
    assert names == sorted(server.shared)
    assert {n.split(".")[1] for n in names} == {"embed", "convs"}
    expected_spec, scalars = server.reply_spec(0)
    assert set(expected_spec) == set(names) and scalars == fit_scalars()
    assert all(dtype == torch.float32 for _, dtype in expected_spec.values())

    record = fed.fit_round(1)
    assert record["answered"] == list(range(10)) and not record["dropped"]
    contexts = fed.runtime.contexts
    sizes = torch.tensor([float(ctx.data.num_samples("train")) for ctx in contexts],
                         dtype=torch.float64)
    for name in names:
        stacked = torch.stack([ctx.state["params"][name].double() for ctx in contexts])
        mean = (stacked * (sizes / sizes.sum()).view(-1, *[1] * (stacked.dim() - 1))).sum(0)
        assert torch.allclose(server.shared[name].double(), mean, atol=1e-6), name
    assert server.round_metrics()["weights"] == pytest.approx((sizes / sizes.sum()).tolist())

    messages = server.configure_evaluate(1, list(range(10)))
    deployed = [client.current(messages[c], contexts[c]) for c in range(10)]
    for name in names:
        for params in deployed:
            assert torch.equal(params[name], server.shared[name]), name
    local = [k for k in deployed[0] if not k.startswith("structure.")]
    assert {"pre.weight", "combine.weight", "readout.weight"} <= set(local)
    for name in local:
        for c, params in enumerate(deployed):
            assert torch.equal(params[name], contexts[c].state["params"][name])  # untouched
    # personalised: each client's feature channel and head is its own (one Adam step moves every
    # entry by +-lr, so a small tensor such as a bias can coincide; the whole set differs)
    flat = [torch.cat([params[k].reshape(-1) for k in local]) for params in deployed]
    initial = torch.cat([server.setup.initial_params[k].reshape(-1) for k in local])
    for i in range(10):
        assert not torch.equal(flat[i], initial)
        for j in range(i):
            assert not torch.equal(flat[i], flat[j]), (i, j)


@require("PROTEINS")
def test_three_rounds_end_to_end_and_state_round_trip():
    fed = _federation()
    assert fed.runtime.server.global_params() is None
    for rnd in range(1, 4):
        line = fed.fit_round(rnd)
        assert math.isfinite(line["train_loss"])
        assert line["bytes_up"] == 10 * sum(v.numel() * 4 for v in fed.runtime.server.shared
                                            .values()) + 10 * 2 * 8
    out = fed.evaluate(3)
    assert "global_test_acc" not in out
    accs = [c["test_acc"] for c in out["clients"]]
    assert len(accs) == 10 and all(0.0 <= a <= 1.0 and math.isfinite(a) for a in accs)
    assert fed.runtime.server.global_params() is None

    server = fed.runtime.server
    buffer = io.BytesIO()
    torch.save(server.state_dict(), buffer)
    buffer.seek(0)
    restored = FedStarServer(server.setup)
    restored.load_state_dict(safe_load(buffer.getvalue(), "server state"))
    assert restored.round_metrics() == server.round_metrics()
    a, b = server.configure_fit(4, [2])[2], restored.configure_fit(4, [2])[2]
    assert a.spec() == b.spec()
    assert all(torch.equal(a.tensors[k], b.tensors[k]) for k in a.tensors)
