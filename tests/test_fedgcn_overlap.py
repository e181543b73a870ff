"""FedGCN on clients that overlap (FedEgo's overlapping label-skew sampler on Cora): the default
setup counts an edge once per client holding it, ``dedup_overlaps`` once, both checked against a
direct computation on the global graph; the bytes the dedup exchange costs; its boundary check."""

from __future__ import annotations

import pytest
import torch

from graphfed.algorithms.averaging.fedgcn import FEATURES
from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.messages import Message, MessageError

OVERLAPPING = ["algorithm=fedgcn", "dataset=Cora", "partition=major_labels",
               "partition.overlap=true", "partition.client_size=0.4", "num_clients=4",
               "rounds=1", "device=cpu"]


def _set_up(*overrides: str):
    fed = build_federation(load_config(None, [*OVERLAPPING, *overrides]), 0)
    return fed, fed.setup()


def _holders(fed, num_nodes: int) -> torch.Tensor:
    """held[c, u]: whether client c holds global node u (read from the partition, as only a
    test may)."""
    held = torch.zeros(len(fed.runtime.contexts), num_nodes, dtype=torch.bool)
    for c, ctx in enumerate(fed.runtime.contexts):
        held[c, ctx.data.global_ids] = True
    return held


def _direct(graph, held, each_once: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Per global node: the sum of its neighbours' features and their number over the global
    edges some client holds, each counted once, or once per client holding it."""
    source, target = graph.edge_index
    copies = (held[:, source] & held[:, target]).sum(0).double()  # m(u, v)
    weight = (copies > 0).double() if each_once else copies
    sums = torch.zeros(graph.num_nodes, graph.x.size(1), dtype=torch.float64)
    sums.index_add_(0, target, weight.view(-1, 1) * graph.x[source].double())
    counts = torch.zeros(graph.num_nodes, dtype=torch.float64).index_add_(0, target, weight)
    return sums, counts


@pytest.mark.parametrize("dedup", [False, True])
def test_server_sums_match_the_global_graph_counted_once_or_per_holder(cora, dedup):
    fed, _ = _set_up(f"fedgcn.dedup_overlaps={str(dedup).lower()}")
    graph = cora.graph
    held = _holders(fed, graph.num_nodes)
    assert int(held.sum(0).max()) > 1  # the partition overlaps
    expected = _direct(graph, held, each_once=dedup)
    server = fed.runtime.server
    for c, ctx in enumerate(fed.runtime.contexts):
        ids = ctx.data.global_ids
        sums, counts = server.totals[c]
        assert torch.allclose(sums.double(), expected[0][ids], atol=1e-4)
        assert torch.equal(counts.double(), expected[1][ids])


def test_the_default_double_counts_shared_edges_and_dedup_does_not(cora):
    default, _ = _set_up()
    dedup, _ = _set_up("fedgcn.dedup_overlaps=true")
    held = _holders(default, cora.graph.num_nodes)
    source, target = cora.graph.edge_index
    shared = (held[:, source] & held[:, target]).sum(0) > 1
    assert int(shared.sum()) > 0  # edges several clients hold
    more = 0
    for c in range(4):
        counted, once = default.runtime.server.totals[c][1], dedup.runtime.server.totals[c][1]
        assert bool((counted >= once).all())
        more += int((counted > once).sum())
    assert more > 0
    # the client trains on (x + S) / (1 + D) from the deduplicated totals
    dedup.fit_round(1)
    ctx = dedup.runtime.contexts[0]
    sums, counts = dedup.runtime.server.totals[0]
    want = (ctx.data.graph.x + sums) / (1 + counts).unsqueeze(1)
    assert torch.allclose(ctx.state[FEATURES], want, atol=1e-6)


def test_dedup_costs_the_clients_edges_in_global_ids(cora):
    _, default = _set_up()
    fed, dedup = _set_up("fedgcn.dedup_overlaps=true")
    width = cora.graph.x.size(1)
    nodes = [len(ctx.data.global_ids) for ctx in fed.runtime.contexts]
    edges = [ctx.data.graph.edge_index.size(1) for ctx in fed.runtime.contexts]
    # ids (8 B) and one feature row (4 B each) per node either way; then counts (4 B per node)
    # by default, or both ends of every directed edge (2 x 8 B) with dedup
    assert default["bytes_up"] == sum(n * (8 + 4 * width + 4) for n in nodes)
    assert dedup["bytes_up"] == sum(n * (8 + 4 * width) + 16 * e
                                    for n, e in zip(nodes, edges, strict=True))


def test_an_edge_outside_the_clients_nodes_is_refused():
    from graphfed.algorithms.registry import get_algorithm
    from graphfed.protocol import Setup

    algorithm = get_algorithm("fedgcn")
    setup = Setup(level="node", num_clients=2, num_classes=2, initial_params={"w": torch.zeros(1)},
                  options=algorithm.options(dedup_overlaps=True))
    server = algorithm.server(setup)
    ids = torch.tensor([3, 7, 9])
    good = {"ids": ids, "features": torch.zeros(3, 2), "edges": torch.tensor([[3, 7], [7, 3]])}
    server.check_setup_reply(0, Message(good))
    with pytest.raises(MessageError, match="client 1: an edge leaves"):
        server.check_setup_reply(1, Message({**good, "edges": torch.tensor([[3], [4]])}))
