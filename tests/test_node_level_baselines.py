"""GCFL, GCFL+ and FedStar at node level (FedSpray's baselines): what a cluster or the federation
shares, what stays with each client, when a cluster splits, and where the structure encodings
come from."""

import pytest
import torch
from torch_geometric.data import Data

from graphfed.config import ConfigError, load_config
from graphfed.experiment import build_federation
from graphfed.mechanisms.updates import flatten
from graphfed.models.gnn import ModelOptions, sgc_propagate
from graphfed.models.structure import DualChannelNodeGNN, degree_encoding, structure_encoding
from tests.conftest import require

CORA = ["dataset=Cora", "partition=louvain", "partition.mode=largest", "num_clients=4",
        "device=cpu"]


def _federation(*extra):
    return build_federation(load_config(None, [*CORA, *extra]), 0)


def _deployed(fed, rnd):
    """Each client's model as it would train next (its pending server message applied)."""
    runtime = fed.runtime
    return [runtime.client.current(runtime.server.configure_evaluate(rnd, [c])[c], ctx)
            for c, ctx in enumerate(runtime.contexts)]


@require("Cora")
@pytest.mark.parametrize("name", ["gcfl", "gcfl+"])
@pytest.mark.parametrize(("model", "scope", "shared"), [
    # mlp_sage has parameters outside ``convs``: they must stay each client's own
    ("mlp_sage", "convs", ("convs.0.", "convs.1.")),
    # a plain GCN's last conv is its classifier: convs_but_last keeps it local
    ("gcn", "convs_but_last", ("convs.0.",)),
])
def test_one_cluster_shares_exactly_its_scope_of_the_node_model(name, model, scope, shared):
    fed = _federation(f"algorithm={name}", f"model={model}", "rounds=1",
                      f"{name}.shared_params={scope}")
    client, contexts = fed.runtime.client, fed.runtime.contexts
    params = client.setup.initial_params
    assert client.names == [k for k in params if k.startswith(shared)]
    assert len(client.names) < len(params)
    fed.fit_round(1)
    deployed = _deployed(fed, 1)
    for k in params:
        same = all(torch.equal(deployed[0][k], other[k]) for other in deployed[1:])
        assert same == (k in client.names), k
        if k not in client.names:  # the client's own training, untouched by the server
            for c, p in enumerate(deployed):
                assert torch.equal(p[k], contexts[c].state["params"][k])
                assert not torch.equal(p[k], params[k])


@require("Cora")
def test_on_a_plain_node_gnn_the_convolutions_are_the_whole_model():
    fed = _federation("algorithm=gcfl", "model=gcn", "rounds=1")
    client = fed.runtime.client
    assert client.names == list(client.setup.initial_params)
    assert fed.runtime.server.dim == sum(v.numel() for v in client.setup.initial_params.values())


@require("Cora")
@pytest.mark.parametrize("name", ["gcfl", "gcfl+"])
@pytest.mark.parametrize(("eps1", "eps2", "splits"), [
    (100.0, 1e-4, True),  # mean norm < eps1 and max norm > eps2: split
    (100.0, 1e6, False),  # no update norm exceeds eps2
    (1e-9, 1e-4, False),  # the mean update is never that small
])
def test_a_cluster_splits_when_and_only_when_the_criteria_hold(name, eps1, eps2, splits):
    fed = _federation(f"algorithm={name}", "model=gcn", "rounds=3", f"{name}.warmup=1",
                      f"{name}.eps1={eps1}", f"{name}.eps2={eps2}",
                      *([f"{name}.seq_length=2"] if name == "gcfl+" else []))
    lines = [fed.fit_round(rnd) for rnd in (1, 2, 3)]
    assert lines[0]["server"]["clusters"] == [[0, 1, 2, 3]]
    clusters = lines[2]["server"]["clusters"]
    if not splits:
        assert clusters == [[0, 1, 2, 3]] and lines[2]["server"]["splits"] == []
        return
    assert lines[1]["server"]["splits"] == [2] and len(lines[1]["server"]["clusters"]) == 2
    assert lines[2]["server"]["splits"][0] == 2  # (round 3 may split a 3-client part again)
    assert sorted(c for part in clusters for c in part) == [0, 1, 2, 3]
    client = fed.runtime.client
    convs = [flatten(p, client.names) for p in _deployed(fed, 3)]
    for cluster in clusters:  # each cluster one model, different from the other cluster's
        assert all(torch.equal(convs[cluster[0]], convs[c]) for c in cluster[1:])
    assert not torch.allclose(convs[clusters[0][0]], convs[clusters[1][0]])


@require("Cora")
@pytest.mark.parametrize("backbone", ["gcn", "sgc"])
def test_fedstar_shares_only_the_structure_channel(backbone):
    fed = _federation("algorithm=fedstar", f"model={backbone}", "rounds=1")
    server, contexts = fed.runtime.server, fed.runtime.contexts
    params = server.setup.initial_params
    structure = sorted(k for k in params if k.startswith("structure."))
    # what crosses the boundary: the structure channel down, the structure channel up
    assert sorted(server.shared) == structure
    assert sorted(server.configure_fit(1, [0])[0].tensors) == structure
    assert sorted(server.reply_spec(0)[0]) == structure
    line = fed.fit_round(1)
    shared_bytes = sum(params[k].numel() * 4 for k in structure)
    assert line["bytes_up"] == 4 * shared_bytes + 4 * 2 * 8  # plus each reply's two scalars

    sizes = torch.tensor([float(ctx.data.num_samples("train")) for ctx in contexts],
                         dtype=torch.float64)
    for k in structure:
        stacked = torch.stack([ctx.state["params"][k].double() for ctx in contexts])
        mean = (stacked * (sizes / sizes.sum()).view(-1, *[1] * (stacked.dim() - 1))).sum(0)
        assert torch.allclose(server.shared[k].double(), mean, atol=1e-6), k
    deployed = _deployed(fed, 1)
    local = [k for k in params if k not in structure]
    assert {"pre.weight", "convs.0.lin.weight" if backbone == "gcn" else "convs.0.weight",
            "combine.weight", "readout.weight"} <= set(local)
    for c, p in enumerate(deployed):
        assert all(torch.equal(p[k], server.shared[k]) for k in structure)
        assert all(torch.equal(p[k], contexts[c].state["params"][k]) for k in local)
    flat = [flatten(p, local) for p in deployed]
    assert all(not torch.equal(flat[i], flat[j]) for i in range(4) for j in range(i))


@require("Cora")
def test_fedstar_encodes_the_structure_of_each_clients_own_subgraph(cora):
    fed = _federation("algorithm=fedstar", "model=sgc", "rounds=1")
    in_dim = fed.data.num_features
    for ctx in fed.runtime.contexts:
        prepared, graph = ctx.data, ctx.data.graph
        expected = structure_encoding(graph.edge_index, graph.num_nodes)
        assert torch.equal(prepared.x[:, in_dim:].cpu(), expected)
        assert torch.allclose(prepared.x[:, :in_dim].cpu(), sgc_propagate(graph, 2))
    # a client's subgraph drops its nodes' edges to other clients: their degrees are local
    ctx = fed.runtime.contexts[0]
    ids = ctx.data.global_ids
    whole = degree_encoding(cora.graph.edge_index, cora.graph.num_nodes)[ids]
    assert not torch.equal(ctx.data.x[:, -whole.size(1):].cpu(), whole)


def test_node_model_predicts_per_node_and_needs_its_encoding():
    model = DualChannelNodeGNN(5, 3, ModelOptions(name="sage", hidden=8, layers=2))
    edges = torch.tensor([[0, 1, 1, 2, 3, 4], [1, 0, 2, 1, 4, 3]])
    graph = Data(x=torch.randn(5, 5), edge_index=edges)
    prepared = model.prepare(graph)
    assert prepared.x.shape == (5, 5 + 32)
    assert model(prepared.x, prepared.edge_index).shape == (5, 3)
    with pytest.raises(ValueError, match="structure encoding"):
        model(graph.x, graph.edge_index)


def test_node_level_configs_the_adaptations_cannot_run_are_refused():
    with pytest.raises(ConfigError, match="feature channel"):
        load_config(None, [*CORA, "algorithm=fedstar", "model=mlp_sage"])
    for model in ("model=sgc", "model.layers=1"):
        with pytest.raises(ConfigError, match="convs_but_last"):
            load_config(None, [*CORA, "algorithm=gcfl", model, "gcfl.shared_params=convs_but_last"])
