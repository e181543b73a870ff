"""FedPer: the model's layers as the personal head sees them, the base alone crossing the
boundary, each client deploying the server's base under its own head, and a head that would
leave no base refused in one line."""

import pytest
import torch
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.errors import GraphfedError
from graphfed.mechanisms.layers import layer_of, layers, top_layers
from graphfed.models.by_level import build_model
from graphfed.models.gnn import ModelOptions
from tests.conftest import error_line, evaluated_after, require

CORA = ["algorithm=fedper", "dataset=Cora", "partition=metis", "num_clients=3", "device=cpu",
        "engine=sequential"]


def _names(level: str, name: str) -> list[str]:
    return [k for k, _ in build_model(level, 8, 3, ModelOptions(name=name)).named_parameters()]


def test_layers_are_modules_in_forward_order_and_the_top_one_is_the_classifier():
    assert [layer_of(g[0]) for g in layers(_names("node", "gcn"))] == ["convs.0", "convs.1"]
    assert top_layers(_names("node", "gcn"), 1) == ["convs.1.bias", "convs.1.lin.weight"]
    gin = _names("graph", "gin")
    assert [layer_of(g[0]) for g in layers(gin)] == ["pre", "convs.0", "convs.1", "post",
                                                     "readout"]
    assert [len(g) for g in layers(gin)] == [2, 4, 4, 2, 2]  # a GIN layer is its whole MLP
    assert top_layers(gin, 1) == ["readout.weight", "readout.bias"]
    assert top_layers(gin, 2) == ["post.weight", "post.bias", "readout.weight", "readout.bias"]


def test_a_head_of_every_layer_is_refused_where_a_base_must_remain():
    assert len(top_layers(_names("node", "gcn"), 2)) == 4
    with pytest.raises(GraphfedError, match="2 top layers leave none below them"):
        top_layers(_names("node", "gcn"), 2, leave_one=True)
    with pytest.raises(GraphfedError, match="too many"):
        top_layers(_names("node", "gcn"), 3)


@require("Cora")
def test_the_base_is_shared_and_each_client_deploys_it_under_its_own_head():
    runtime, records = evaluated_after(CORA)
    base = runtime.server.params
    assert set(base) == {"convs.0.bias", "convs.0.lin.weight"}  # the head never reaches it
    assert runtime.server.global_params() is None
    heads = []
    for ctx, record in zip(runtime.contexts, records, strict=True):
        own = ctx.state["params"]
        deployed = {**own, **base}
        assert record["test_loss"] == ctx.trainer.evaluate(deployed, ctx.data)["test"]["loss"]
        heads.append(own["convs.1.lin.weight"])
    initial = runtime.server.setup.initial_params["convs.1.lin.weight"]
    assert all(not torch.equal(h, initial) for h in heads)
    assert not torch.equal(heads[0], heads[1]) and not torch.equal(heads[1], heads[2])


@require("MUTAG")
def test_at_graph_level_the_readout_is_the_head():
    runtime, records = evaluated_after(["algorithm=fedper", "dataset=MUTAG",
                                        "partition=dirichlet", "model=gin", "num_clients=3",
                                        "device=cpu"])
    assert not any(k.startswith("readout.") for k in runtime.server.params)
    assert any(k.startswith("post.") for k in runtime.server.params)
    assert all(0.0 <= r["test_acc"] <= 1.0 for r in records)


@require("Cora")
def test_a_head_that_leaves_no_base_is_one_error_line():
    result = CliRunner().invoke(app, ["run", *CORA, "rounds=1", "fedper.personal_layers=2",
                                      "--out", "/tmp/m1/fedper-refused"])
    assert "leave none below them" in error_line(result)
