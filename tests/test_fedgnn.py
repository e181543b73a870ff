"""FedGNN as a FED-PUB baseline: on overlapping clients each client's expanded graph is its
nodes' one-hop neighbourhood in the union of the clients' graphs (foreign nodes anonymous,
unlabelled); on a disjoint partition, or with ``expand=false``, it is FedAvg to the bit; its
setup boundary check, on Cora."""

import pytest
import torch

from graphfed.algorithms.averaging.fedgnn import EXPANSION, VIEW
from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.messages import Message, MessageError
from tests.conftest import evaluated_after, require

OVERLAPPING = ["algorithm=fedgnn", "dataset=Cora", "partition=major_labels",
               "partition.overlap=true", "partition.client_size=0.4", "num_clients=4",
               "rounds=1", "device=cpu"]
DISJOINT = ["dataset=Cora", "partition=metis", "num_clients=3", "device=cpu",
            "engine=sequential"]


@pytest.fixture(scope="module")
def overlapping():
    fed = build_federation(load_config(None, OVERLAPPING), 0)
    fed.setup()
    fed.fit_round(1)
    return fed


def _union_edges(fed) -> set[tuple[int, int]]:
    """Every edge some client holds, in global ids (read from the partition, as only a test
    may)."""
    edges: set[tuple[int, int]] = set()
    for ctx in fed.runtime.contexts:
        ids = ctx.data.global_ids
        edges |= {(int(a), int(b)) for a, b in ids[ctx.data.graph.edge_index].t()}
    return edges


@require("Cora")
def test_each_expanded_graph_is_the_one_hop_union_neighbourhood(cora, overlapping):
    union = _union_edges(overlapping)
    union |= {(b, a) for a, b in union}
    grown = 0
    for ctx in overlapping.runtime.contexts:
        own = ctx.data.global_ids.tolist()
        held = set(own)
        foreign = sorted({b for a, b in union if a in held and b not in held})
        names = own + foreign  # the foreign nodes arrive sorted by global id
        view = ctx.cache[VIEW]
        assert view.x.shape[0] == len(names)
        assert torch.equal(view.x[len(own):], cora.graph.x[foreign].float())
        got = {(names[a], names[b]) for a, b in view.graph.edge_index.t().tolist()}
        assert got == {(a, b) for a, b in union if a in held}
        grown += len(foreign)
        # anonymous neighbours carry no label: the splits are the client's own nodes
        for split in ("train", "val", "test"):
            assert torch.equal(view.index[split], ctx.data.index[split])
    assert grown > 0  # the partition overlaps, so some client grew


@require("Cora")
def test_the_expansion_is_sent_once_and_kept_in_state(overlapping):
    server = overlapping.runtime.server
    assert server.ready == set(range(len(overlapping.runtime.contexts)))
    message = server.configure_fit(2, [0])[0]
    assert set(message.tensors) == set(server.params)
    assert all(EXPANSION in ctx.state for ctx in overlapping.runtime.contexts)


@require("Cora")
@pytest.mark.parametrize("overrides", [["algorithm=fedgnn"],
                                       ["algorithm=fedgnn", "fedgnn.expand=false"]])
def test_without_shared_nodes_or_expansion_it_is_fedavg_to_the_bit(overrides):
    runtime, records = evaluated_after([*overrides, *DISJOINT])
    fed_runtime, fed_records = evaluated_after(["algorithm=fedavg", *DISJOINT])
    ours, theirs = runtime.server.global_params(), fed_runtime.server.global_params()
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs)
    assert records == fed_records


@require("Cora")
def test_a_setup_reply_with_an_edge_off_its_nodes_is_refused(overlapping):
    server = overlapping.runtime.server
    ids = torch.tensor([3, 5, 9])
    bad = Message(tensors={"ids": ids, "features": torch.zeros(3, 4),
                           "edges": torch.tensor([[3, 5], [5, 7]])})
    with pytest.raises(MessageError, match="edge leaves"):
        server.check_setup_reply(0, bad)
    repeated = Message(tensors={"ids": torch.tensor([3, 3]), "features": torch.zeros(2, 4),
                                "edges": torch.zeros(2, 0, dtype=torch.long)})
    with pytest.raises(MessageError, match="repeated"):
        server.check_setup_reply(0, repeated)
