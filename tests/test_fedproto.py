"""FedProto: the server's prototypes are the count-weighted class means of every client's
training embeddings, the regulariser pulls embeddings to them, clients of two model sizes
federate, and a bad options line is refused in one line."""

import pytest
import torch
from typer.testing import CliRunner

from graphfed.algorithms.personalized.fedproto import KNOWN, PROTOTYPES, embeddings
from graphfed.cli import app
from graphfed.mechanisms.prototypes import prototype_distance
from tests.conftest import error_line, evaluated_after, require

CORA = ["dataset=Cora", "partition=metis", "num_clients=3", "device=cpu", "local_epochs=2"]


def _train_embeddings(runtime, c):
    ctx = runtime.contexts[c]
    return embeddings(ctx.state["params"], ctx, ctx.data, ("train",))["train"]


@require("Cora")
@pytest.mark.parametrize("name", ["fedproto", "fedtgp"])
def test_two_model_sizes_federate_and_keep_their_sizes(name):
    """Clients of hidden width 16 and 48 train in one federation: each keeps its own size, the
    embeddings (the prototypes) share one width, and every client is scored."""
    runtime, records = evaluated_after([f"algorithm={name}", *CORA,
                                        f"{name}.hidden_widths=[16,48]"], rounds=2)
    widths = [runtime.contexts[c].state["params"]["convs.0.lin.weight"].shape[0]
              for c in range(3)]
    assert widths == [16, 48, 16]
    assert {_train_embeddings(runtime, c)[0].shape[1] for c in range(3)} == {64}
    assert runtime.server.prototypes.shape == (7, 64)
    assert all(0.3 < r["test_acc"] <= 1.0 for r in records), records


@require("Cora")
def test_server_prototypes_are_the_count_weighted_class_means():
    """After a round every client held every class it has: each global prototype is the mean
    embedding over all clients' training nodes of that class (Eq. 6)."""
    runtime, _ = evaluated_after(["algorithm=fedproto", *CORA], rounds=1)
    pairs = [_train_embeddings(runtime, c) for c in range(3)]
    embedding = torch.cat([h for h, _ in pairs]).double()
    labels = torch.cat([y for _, y in pairs])
    for k in range(7):
        expected = embedding[labels == k].mean(0).float()
        assert torch.allclose(runtime.server.prototypes[k], expected, atol=1e-5), k
    assert bool((runtime.server.known == 1).all())


@require("Cora")
def test_unweighted_mean_differs_where_clients_hold_a_class_unevenly():
    """weighted=false (the authors' code) is the plain mean of the clients' class means."""
    runtime, _ = evaluated_after(["algorithm=fedproto", *CORA, "fedproto.weighted=false"],
                                 rounds=1)
    per_client = [_train_embeddings(runtime, c) for c in range(3)]
    k = 0
    means = [h[y == k].double().mean(0) for h, y in per_client if (y == k).any()]
    assert torch.allclose(runtime.server.prototypes[k], torch.stack(means).mean(0).float(),
                          atol=1e-5)


@require("Cora")
def test_the_regulariser_pulls_embeddings_to_the_global_prototypes():
    """With a large lambda the clients' training embeddings end nearer their classes' global
    prototypes than with lambda = 0, from the same start."""
    def spread(lam):
        runtime, _ = evaluated_after(["algorithm=fedproto", *CORA, f"fedproto.lam={lam}"],
                                     rounds=3)
        message = runtime.server.configure_fit(4, [0])[0]
        return sum(float(prototype_distance(h, message.tensors[PROTOTYPES][y], "l2"))
                   for h, y in (_train_embeddings(runtime, c) for c in range(3)))

    assert spread(10.0) < 0.5 * spread(0.0)


@require("Cora")
def test_prediction_by_nearest_prototype_differs_from_the_head():
    _, by_prototype = evaluated_after(["algorithm=fedproto", *CORA], rounds=2)
    _, by_head = evaluated_after(["algorithm=fedproto", *CORA, "fedproto.predict=head"],
                                 rounds=2)
    assert [r["test_acc"] for r in by_prototype] != [r["test_acc"] for r in by_head]


def test_a_layer_that_reads_its_width_is_refused_in_one_line():
    result = CliRunner().invoke(app, ["run", "algorithm=fedproto", "model=gat", "dataset=Cora"])
    assert "gcn, sage, mlp at node level" in error_line(result)


def test_known_classes_start_empty():
    """Before any reply the server knows no class: round 1 trains on cross-entropy alone."""
    from graphfed.algorithms.personalized.fedproto import FedProtoServer
    from graphfed.algorithms.registry import get_algorithm
    from graphfed.protocol import Setup

    setup = Setup(level="node", num_clients=2, num_classes=3,
                  initial_params={"head.weight": torch.zeros(3, 5)},
                  options=get_algorithm("fedproto").options())
    message = FedProtoServer(setup).configure_fit(1, [0])[0]
    assert message.tensors[KNOWN].sum() == 0 and message.tensors[PROTOTYPES].shape == (3, 5)
