"""Sampled neighbourhoods (``sampling.*``): the subgraph a mini-batch trains on, the per-epoch
node subset, sampled evaluation and the config checks, on real Cora."""

import pytest
import torch
from torch_geometric.nn import SAGEConv
from torch_geometric.utils import k_hop_subgraph

from graphfed.config import ConfigError, load_config
from graphfed.data.federated import NodeClient
from graphfed.data.sampling import NeighbourSampler, SamplingOptions
from graphfed.errors import GraphfedError
from graphfed.experiment import build_federation
from graphfed.models.gnn import MlpSageClassifier, ModelOptions, NodeClassifier
from graphfed.training.batches import PreparedNodeClient
from tests.conftest import require


def _client(cora, train: int = 300) -> NodeClient:
    graph = cora.graph.clone()
    n = graph.num_nodes
    graph.train_mask = torch.zeros(n, dtype=torch.bool)
    graph.train_mask[:train] = True
    graph.val_mask = torch.zeros(n, dtype=torch.bool)
    graph.test_mask = torch.zeros(n, dtype=torch.bool)
    graph.test_mask[-500:] = True
    return NodeClient(graph=graph, global_ids=torch.arange(n))


def test_subgraph_holds_real_sampled_edges_within_the_hops(cora):
    g = cora.graph
    sampler = NeighbourSampler(g.edge_index, g.num_nodes)
    centres = torch.tensor([3, 70, 1500, 2000])
    nodes, edges = sampler.subgraph(centres, [6, 4])
    assert torch.equal(nodes[:4], centres) and len(nodes.unique()) == len(nodes)
    adjacency = set(map(tuple, g.edge_index.t().tolist()))
    for s, t in nodes[edges].t().tolist():
        assert (s, t) in adjacency
    # each centre drew exactly 6 neighbours (with replacement), and nothing is beyond 2 hops
    assert torch.equal(torch.bincount(edges[1], minlength=len(nodes))[:4], torch.full((4,), 6))
    reach, _, _, _ = k_hop_subgraph(centres, 2, g.edge_index, num_nodes=g.num_nodes)
    assert set(nodes.tolist()) <= set(reach.tolist())
    # a node is expanded once: no node draws more than its hop's fanout
    assert int(torch.bincount(edges[1]).max()) == 6


def test_many_draws_approach_the_full_neighbourhood_mean(cora):
    """Uniform draws with replacement: with many of them a SAGE layer's sampled output tends to
    its whole-graph output at the centres."""
    g = cora.graph
    torch.manual_seed(0)
    conv = SAGEConv(g.num_features, 8)
    centres = torch.tensor([10, 20, 30, 40])
    full = conv(g.x, g.edge_index)[centres]
    nodes, edges = NeighbourSampler(g.edge_index, g.num_nodes).subgraph(centres, [4000])
    sampled = conv(g.x[nodes], edges)[:4]
    assert torch.allclose(sampled, full, atol=0.02)
    assert not torch.allclose(sampled, full, atol=1e-6)


def test_epochs_train_on_a_fresh_fraction_of_the_client(cora):
    model = MlpSageClassifier(cora.num_features, cora.num_classes, ModelOptions(hidden=16))
    data = PreparedNodeClient(_client(cora), model, torch.device("cpu"),
                              SamplingOptions(fanouts=[6, 6], train_fraction=0.05))
    epochs = [torch.cat([b.x[b.index] for b in data.batches("train", 32, shuffle=True)])
              for _ in range(2)]
    per_epoch = int(cora.graph.num_nodes * 0.05)
    assert all(len(e) == per_epoch for e in epochs)
    assert not torch.equal(epochs[0], epochs[1])
    batch = next(data.batches("train", 32, shuffle=True))
    assert torch.equal(batch.targets, batch.y[:32]) and len(batch.x) > 32
    assert int(data.index["train"].max()) < 300


def test_sampled_evaluation_scores_every_node_and_varies_with_the_draw(cora):
    model = MlpSageClassifier(cora.num_features, cora.num_classes, ModelOptions(hidden=16))
    params = dict(model.named_parameters())
    call = lambda m, args, kwargs=None: torch.func.functional_call(m, params, args, kwargs)  # noqa: E731
    model.eval()
    sampled = PreparedNodeClient(_client(cora), model, torch.device("cpu"),
                                 SamplingOptions(fanouts=[6, 6], evaluate="sampled"))
    logits, targets = sampled.outputs(model, call, ("test",))["test"]
    again, _ = sampled.outputs(model, call, ("test",))["test"]
    assert logits.shape == (500, cora.num_classes) and torch.equal(targets, cora.graph.y[-500:])
    assert not torch.allclose(logits, again)
    full = PreparedNodeClient(_client(cora), model, torch.device("cpu"),
                              SamplingOptions(fanouts=[6, 6]))  # trains sampled, scores full
    assert torch.equal(full.outputs(model, call, ("test",))["test"][0],
                       full.outputs(model, call, ("test",))["test"][0])


def test_a_model_with_whole_graph_edge_weights_refuses_sampling(cora):
    gcn = NodeClassifier(cora.num_features, cora.num_classes, ModelOptions(name="gcn"))
    with pytest.raises(GraphfedError, match="GCN normalisation"):
        PreparedNodeClient(_client(cora), gcn, torch.device("cpu"), SamplingOptions(fanouts=[6]))


@pytest.mark.parametrize("overrides, message", [
    (["sampling.evaluate=sampled"], "needs sampling.fanouts"),
    (["sampling.fanouts=[6,6]", "model=gcn"], "gcn weights edges"),
    (["sampling.fanouts=[6,6]", "algorithm=fedego"], "fedego samples its own"),
    (["sampling.fanouts=[6,6]", "dataset=PROTEINS", "model=gin"], "graph-level"),
    (["sampling.fanouts=[]"], "fanouts"),
    (["sampling.train_fraction=0"], "train_fraction"),
])
def test_bad_sampling_configs_are_refused(overrides, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


@require("Cora")
def test_sampled_training_learns_as_well_as_whole_graph_training():
    accuracy = {}
    for name, extra in (("sampled", ["sampling.fanouts=[6,6]", "sampling.evaluate=sampled"]),
                        ("whole", [])):
        config = load_config(None, ["dataset=Cora", "model=mlp_sage", "model.hidden=32",
                                    "num_clients=3", "batch_size=32", "local_epochs=3",
                                    "optimizer.lr=0.01", "sampling.train_fraction=0.2",
                                    "device=cpu", *extra])
        fed = build_federation(config, 0)
        for rnd in range(1, 6):
            fed.fit_round(rnd)
        accuracy[name] = fed.evaluate(5)["test_acc"]
    assert accuracy["sampled"] > 0.5 and abs(accuracy["sampled"] - accuracy["whole"]) < 0.1
