"""Models, cached graph preparation, batching and metrics."""

import math

import pytest
import torch
from torch_geometric.data import Batch
from torch_geometric.nn import GCNConv

from graphfed.data import build_partition, materialize, parse_partition
from graphfed.metrics import (
    classification_metrics,
    entropy,
    many_classification_metrics,
    pearson,
    variance,
)
from graphfed.models import ModelOptions, build_model
from graphfed.training.batches import PreparedGraphClient
from tests.conftest import require


@require("Cora")
@pytest.mark.parametrize("name", ["gcn", "sage", "sgc", "gat", "mlp"])
def test_node_models_give_class_logits(cora, name):
    torch.manual_seed(0)
    model = build_model("node", cora.num_features, cora.num_classes,
                        ModelOptions(name=name, hidden=16, heads=4))
    g = model.prepare(cora.graph)
    out = model(g.x, g.edge_index, getattr(g, "edge_weight", None))
    assert out.shape == (cora.graph.num_nodes, cora.num_classes)
    assert torch.isfinite(out).all()


@require("PROTEINS")
@pytest.mark.parametrize("name", ["gin", "gcn", "sage", "gat", "mlp"])
def test_graph_models_give_one_row_per_graph(proteins, name):
    model = build_model("graph", proteins.num_features, 2, ModelOptions(name=name, layers=3))
    batch = model.prepare(Batch.from_data_list(proteins.graphs[:7]))
    out = model(batch.x, batch.edge_index, batch.batch, 7, getattr(batch, "edge_weight", None))
    assert out.shape == (7, 2)


def test_gin_backbone_has_the_papers_parameter_count():
    # FGFL spec 3.7: 29,506 parameters on PROTEINS (3 features, 2 classes).
    model = build_model("graph", 3, 2, ModelOptions(name="gin", layers=3, hidden=64))
    assert sum(p.numel() for p in model.parameters()) == 29_506


@require("Cora")
def test_cached_gcn_normalisation_equals_pyg_computing_it_each_pass(cora):
    torch.manual_seed(0)
    model = build_model("node", cora.num_features, cora.num_classes,
                        ModelOptions(name="gcn", layers=1, dropout=0.0)).eval()
    reference = GCNConv(cora.num_features, cora.num_classes)
    reference.load_state_dict(model.convs[0].state_dict())
    g = model.prepare(cora.graph)
    ours = model(g.x, g.edge_index, g.edge_weight)
    assert torch.allclose(ours, reference(cora.graph.x, cora.graph.edge_index), atol=1e-5)


@require("PROTEINS")
def _by_target(edge_index: torch.Tensor) -> torch.Tensor:
    return edge_index[:, torch.argsort(edge_index[1] * (edge_index.max() + 1) + edge_index[0])]


def test_slicing_the_collated_batch_equals_collating_the_subset(proteins):
    data = materialize(proteins, build_partition(proteins, parse_partition("uniform"), 2, 0))
    model = build_model("graph", 3, 2, ModelOptions(name="gin"))
    prepared = PreparedGraphClient(data.clients[0], model, torch.device("cpu"))
    ids = torch.tensor([5, 1, 17, 30])
    sliced = prepared.splits["train"].take(ids)
    chosen = [data.clients[0].graphs["train"][i] for i in sorted(ids.tolist())]
    direct = Batch.from_data_list(chosen)
    assert torch.equal(sliced.x, direct.x)
    # the same edges (prepared edges are sorted by target, PyG's collation keeps their order)
    assert torch.equal(sliced.edge_index, _by_target(direct.edge_index))
    assert torch.equal(sliced.batch, direct.batch)
    assert torch.equal(sliced.y, direct.y)


def test_classification_metrics_match_hand_computation():
    target = torch.tensor([0, 0, 1, 1, 2, 2])
    pred = torch.tensor([0, 1, 1, 1, 0, 2])
    logits = torch.nn.functional.one_hot(pred, 4).float()
    m = classification_metrics(logits, target, 4)
    assert m["acc"] == pytest.approx(4 / 6)
    # per-class F1: class0 2*1/(2+1+1)=0.5, class1 2*2/(4+1+0)=0.8, class2 2/(2+0+1)=2/3
    assert m["macro_f1"] == pytest.approx((0.5 + 0.8 + 2 / 3) / 3)
    assert m["n"] == 6


def test_many_sets_scored_together_are_each_set_scored_by_hand():
    gen = torch.Generator().manual_seed(0)
    sets = []
    for size, majority in ((6, None), (0, 1), (9, 2), (1, 0)):
        logits = torch.randn(size, 4, generator=gen)
        target = torch.randint(0, 4, (size,), generator=gen)
        sets.append((logits, target, majority))
    for (logits, target, majority), got in zip(sets, many_classification_metrics(sets, 4),
                                               strict=True):
        n, pred = len(target), logits.argmax(1)
        assert got["n"] == n
        if not n:
            assert got["acc"] == 0 and math.isnan(got["loss"]) and got["macro_f1"] == 0
            assert got["minority_n"] == 0 and "minority_acc" not in got
            continue
        assert got["acc"] == pytest.approx(float((pred == target).float().mean()))
        assert got["loss"] == pytest.approx(
            float(torch.nn.functional.cross_entropy(logits, target)), rel=1e-6)
        f1 = [2 * int(((pred == k) & (target == k)).sum())
              / (int((pred == k).sum()) + int((target == k).sum()))
              for k in range(4) if int((pred == k).sum()) + int((target == k).sum())]
        assert got["macro_f1"] == pytest.approx(sum(f1) / len(f1))
        if majority is not None:
            others = target != majority
            assert got["minority_n"] == int(others.sum())
            assert got["minority_acc"] == pytest.approx(
                float((pred[others] == target[others]).float().mean()))
    assert many_classification_metrics([], 4) == []


def test_fairness_measures():
    assert variance([0.5, 0.5, 0.5]) == 0
    assert entropy([1, 1, 1, 1]) == pytest.approx(torch.log(torch.tensor(4.0)).item())
    assert entropy([1, 0, 0, 0]) == pytest.approx(0.0)
    assert math.isnan(entropy([1, float("nan"), 1]))  # a diverged client: unknown, not 0
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)


@require("PROTEINS")
@pytest.mark.parametrize("persistent", [False, True])
def test_a_persistent_optimizer_carries_adam_state_across_rounds(proteins, persistent):
    from graphfed.training import Trainer, prepare_client
    from graphfed.training.trainer import OptimizerOptions

    data = materialize(proteins, build_partition(proteins, parse_partition({"name": "uniform"}),
                                                 2, seed=0))
    model = build_model("graph", proteins.num_features, 2, ModelOptions(name="gin", dropout=0.0))
    trainer = Trainer(model, OptimizerOptions(lr=0.01, persistent=persistent), 2)
    client = prepare_client(data.clients[0], model, torch.device("cpu"))
    memory: dict = {}
    start = trainer.initial_params()
    once, _ = trainer.train(start, client, 1, None, memory=memory)
    twice, _ = trainer.train(once, client, 1, None, memory=memory)
    fresh, _ = trainer.train(once, client, 1, None)
    assert ("optimizer" in memory) is persistent
    if persistent:
        assert all(int(s["step"]) == 2 for s in memory["optimizer"]["state"].values())
    same = all(torch.allclose(twice[k], fresh[k]) for k in twice)
    assert same is not persistent  # carried moments change the second step
