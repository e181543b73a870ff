"""FGSSL: its two terms against their equations written out node by node, their minima, its
limit (both weights 0 is FedAvg), and the authors' code's setting, on Cora."""

import pytest
import torch
from typer.testing import CliRunner

from graphfed.algorithms.averaging.fgssl import (
    edge_feature_distillation,
    semantic_contrast,
    structure_distillation,
)
from graphfed.cli import app
from graphfed.mechanisms.representation import RepresentationTap
from tests.conftest import error_line, evaluated_after, require

CORA = ["dataset=Cora", "partition=metis", "num_clients=3", "device=cpu", "engine=sequential"]


def _hidden(runtime, client: int = 0) -> tuple[torch.Tensor, object]:
    """Every node's representation under the global model (evaluation mode), and the data."""
    ctx = runtime.contexts[client]
    with RepresentationTap(ctx.trainer.model) as tap:
        ctx.trainer.outputs(runtime.server.global_params(), ctx.data, ("train",))
        return tap.read().double(), ctx.data


@pytest.fixture(scope="module")
def fedavg():
    return evaluated_after(["algorithm=fedavg", *CORA])


def _direct_contrast(local, global_, labels, tau):
    """ℓ_FNSC, a loop over anchors and positives."""
    total = 0.0
    for i in range(len(local)):
        s = torch.nn.functional.cosine_similarity(local[i:i + 1], global_, dim=1) / tau
        negatives = s[labels != labels[i]].exp().sum()
        positives = s[labels == labels[i]]
        total += float(-(positives.exp() / (positives.exp() + negatives)).log().mean())
    return total / len(local)


def _direct_structure(local, global_, edge_index, omega):
    """ℓ_FGSD, a loop over the nodes with neighbours."""
    terms = []
    for i in edge_index[0].unique():
        neighbours = edge_index[1, edge_index[0] == i]

        def dist(h, i=i, neighbours=neighbours):
            s = torch.nn.functional.cosine_similarity(h[i:i + 1], h[neighbours], dim=1)
            return torch.softmax(s / omega, dim=0)

        p, q = dist(global_), dist(local)
        terms.append(float((p * (p / q).log()).sum()))
    return sum(terms) / len(terms)


@require("Cora")
def test_semantic_contrast_is_the_equation_and_prefers_the_own_class(fedavg):
    hidden, data = _hidden(fedavg[0])
    index = data.index["train"]
    global_, labels = hidden[index], data.y[index]
    local = global_ + 0.3 * torch.randn_like(global_)
    loss = semantic_contrast(local, global_, labels, 0.1)
    assert loss.item() == pytest.approx(_direct_contrast(local, global_, labels, 0.1), rel=1e-9)
    # the same representations read with the labels shuffled: nodes now sit at another
    # class's global nodes, and the contrast is higher
    shuffled = labels[torch.randperm(len(labels), generator=torch.Generator().manual_seed(0))]
    assert semantic_contrast(global_, global_, labels, 0.1) < semantic_contrast(
        global_, global_, shuffled, 0.1) - 0.1


@require("Cora")
def test_structure_distillation_is_the_equation_and_vanishes_on_the_global_model(fedavg):
    hidden, data = _hidden(fedavg[0])
    edges = data.edge_index
    local = hidden + 0.5 * torch.randn_like(hidden)
    loss = structure_distillation(local, hidden, edges, 0.1)
    assert loss.item() == pytest.approx(_direct_structure(local, hidden, edges, 0.1), rel=1e-9)
    assert loss.item() > 1e-3
    assert structure_distillation(hidden, hidden, edges, 0.1).abs().item() < 1e-12


@require("Cora")
def test_the_codes_edge_term_vanishes_on_the_global_model_and_only_there(fedavg):
    hidden, data = _hidden(fedavg[0])
    edges = data.edge_index
    assert edge_feature_distillation(hidden, hidden, edges, 0.1).abs().item() < 1e-12
    assert edge_feature_distillation(hidden.flip(0), hidden, edges, 0.1).item() > 1e-3


@require("Cora")
def test_both_weights_zero_is_fedavg_to_the_bit(fedavg):
    runtime, records = evaluated_after(["algorithm=fgssl", "fgssl.semantic_weight=0",
                                        "fgssl.structure_weight=0", *CORA])
    ours, theirs = runtime.server.global_params(), fedavg[0].server.global_params()
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
    assert records == fedavg[1]


@require("Cora")
@pytest.mark.parametrize("overrides", [[], ["fgssl.structure=edge_features",
                                            "fgssl.semantic_weight=0",
                                            "fgssl.structure_weight=0.1"]])
def test_the_paper_and_the_code_settings_train_away_from_fedavg(fedavg, overrides):
    runtime, _ = evaluated_after(["algorithm=fgssl", *overrides, *CORA])
    ours, theirs = runtime.server.global_params(), fedavg[0].server.global_params()
    assert not all(torch.equal(ours[k], theirs[k]) for k in theirs)
    assert all(torch.isfinite(v).all() for v in ours.values())


def test_a_node_model_without_a_hidden_representation_is_refused():
    result = CliRunner().invoke(app, ["run", "algorithm=fgssl", "model=sgc"])
    assert "fgssl" in error_line(result)
