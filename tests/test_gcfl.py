"""GCFL and GCFL+: cluster-wise averaging of the convolutions, the split rule, DTW."""

import io
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from graphfed.algorithms.clustered.gcfl import GCFLClient
from graphfed.algorithms.clustered.gcfl_plus import GPFL_CODE_EPS, gpfl_code_overrides
from graphfed.algorithms.registry import get_algorithm
from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.mechanisms.clustering import dtw_distance
from graphfed.mechanisms.updates import flatten
from graphfed.messages import Message
from graphfed.protocol import Setup
from graphfed.serialization import safe_load
from tests.conftest import require


def _server(name, n=6, dim=8, **options):
    algorithm = get_algorithm(name)
    params = {"convs.0.weight": torch.zeros(dim), "readout.weight": torch.zeros(2)}
    setup = Setup(level="graph", num_clients=n, num_classes=2, initial_params=params,
                  options=algorithm.options(**options))
    return algorithm.server(setup)


def _replies(updates, sizes=None, fit=1, clients=None):
    sizes = sizes or [10] * len(updates)
    clients = clients or range(len(updates))
    return {c: Message({"update": u.float()}, {"num_samples": s, "fit": fit})
            for c, u, s in zip(clients, updates, sizes, strict=True)}


def _two_groups(scale=0.2):
    """Three clients along +d, three along -d: the cluster mean is ~0, each norm is large."""
    torch.manual_seed(0)
    d = torch.randn(8)
    d = d / d.norm()
    return [scale * (d + 0.01 * torch.randn(8)) for _ in range(3)] + [
        scale * (-d + 0.01 * torch.randn(8)) for _ in range(3)]


def test_dtw_matches_hand_computation():
    assert dtw_distance(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0])) == 0.0
    # [0, 1] vs [0, 0, 1]: the repeated 0 aligns at no cost
    assert dtw_distance(np.array([0.0, 1.0]), np.array([0.0, 0.0, 1.0])) == 0.0
    assert dtw_distance(np.array([0.0]), np.array([3.0, 4.0])) == pytest.approx(5.0)
    # squared costs [[1, 1, 9], [1, 1, 1]]; the cheapest monotone path sums to 3
    a, b = np.array([0.0, 2.0]), np.array([1.0, 1.0, 3.0])
    assert dtw_distance(a, b) == pytest.approx(3 ** 0.5)
    assert dtw_distance(b, a) == pytest.approx(3 ** 0.5)


def test_gcfl_splits_opposite_groups_after_warmup():
    server = _server("gcfl", warmup=1)
    server.aggregate_fit(1, _replies(_two_groups()))
    assert server.clusters == [list(range(6))]  # warm-up round: no split
    server.aggregate_fit(2, _replies(_two_groups()))
    assert sorted(server.clusters) == [[0, 1, 2], [3, 4, 5]]
    # each client receives its own cluster's size-weighted mean update
    ups = _two_groups()
    server.aggregate_fit(3, _replies(ups, sizes=[10, 20, 30, 10, 10, 10]))
    expected = (10 * ups[0] + 20 * ups[1] + 30 * ups[2]) / 60
    message = server.configure_fit(4, [1])[1]
    assert torch.allclose(message.tensors["cluster_update"], expected, atol=1e-6)


def test_a_cluster_with_a_large_mean_update_is_not_split():
    server = _server("gcfl", warmup=0)
    aligned = [0.5 * torch.ones(8) + 0.01 * i for i in range(6)]
    server.aggregate_fit(1, _replies(aligned))
    assert server.clusters == [list(range(6))]


def test_gcfl_plus_splits_by_dtw_of_update_norm_sequences():
    server = _server("gcfl+", warmup=0, seq_length=3, eps1=10.0)  # isolate the DTW cut
    d = torch.ones(8) / 8 ** 0.5
    for rnd in range(1, 5):
        # the clients' update norms follow two different trends; directions cancel out
        small = [0.2 * d * (1 + 0.01 * c) for c in range(3)]
        growing = [-0.2 * d * rnd * (1 + 0.01 * c) for c in range(3)]
        server.aggregate_fit(rnd, _replies(small + growing))
        if server.splits:
            break
    assert sorted(server.clusters) == [[0, 1, 2], [3, 4, 5]]
    state = server.state_dict()
    fresh = _server("gcfl+", warmup=0, seq_length=3, eps1=10.0)
    fresh.load_state_dict(state)
    assert fresh.clusters == server.clusters and fresh.sequences == server.sequences


@require("PROTEINS")
@pytest.mark.parametrize("name", ["gcfl", "gcfl+"])
@pytest.mark.parametrize("scope", ["convs", "all"])
def test_one_cluster_shares_its_scope_and_keeps_the_rest_personal(name, scope):
    config = load_config(None, ["dataset=PROTEINS", f"algorithm={name}", "model=gin",
                                "partition=gcfl_chunk", "partition.chunk=20", "num_clients=4",
                                "batch_size=64", "device=cpu", "rounds=2",
                                f"{name}.shared_params={scope}"])
    fed = build_federation(config, 0)
    fed.fit_round(1)
    server, contexts = fed.runtime.server, fed.runtime.contexts
    assert server.global_params() is None
    client = fed.runtime.client
    convs = [k for k in client.setup.initial_params if k.startswith("convs.")]
    assert client.names == (convs if scope == "convs" else list(client.setup.initial_params))
    assert server.dim == sum(client.setup.initial_params[k].numel() for k in client.names)
    deployed = [client.current(server.configure_evaluate(1, [c])[c], ctx)
                for c, ctx in enumerate(contexts)]
    for k in deployed[0]:  # shared: one value in the cluster; the rest: each client's own
        same = all(torch.allclose(deployed[0][k], other[k]) for other in deployed[1:])
        assert same == (k in client.names), k
    assert "global_test_acc" not in fed.evaluate(1)


def test_gpfl_code_overrides_run_gcfl_plus_as_the_gpfl_code():
    overrides = gpfl_code_overrides("PROTEINS")
    config = load_config(None, ["dataset=PROTEINS", "algorithm=gcfl+", "model=gin", *overrides])
    options = config.algorithm_options()
    assert (options.eps1, options.eps2, options.seq_length) == (0.03, 0.06, 10)
    assert options.warmup == 20 and options.shared_params == "all" and not options.standardize
    assert GPFL_CODE_EPS["NCI1"] == (0.1, 0.21) and GPFL_CODE_EPS["Yeast"] == (0.1, 0.2)


def test_exactly_opposite_updates_split_without_a_negative_edge_weight():
    d = torch.ones(8)
    server = _server("gcfl", warmup=0)
    server.aggregate_fit(1, _replies([d, 2 * d, 3 * d, -d, -2 * d, -3 * d]))
    assert sorted(server.clusters) == [[0, 1, 2], [3, 4, 5]]


def test_a_client_left_out_of_a_round_keeps_its_pending_cluster_mean():
    server = _server("gcfl", n=3)
    ups = [torch.full((8,), float(c + 1)) for c in range(3)]
    server.aggregate_fit(1, _replies(ups, sizes=[10, 10, 20]))
    first = (ups[0] + ups[1] + 2 * ups[2]) / 4
    server.aggregate_fit(2, _replies(ups[:2], fit=2, clients=[0, 1]))  # client 2 not sampled
    message = server.configure_fit(3, [0, 2])
    assert torch.allclose(message[2].tensors["cluster_update"], first)
    assert message[2].scalars["for_fit"] == 1
    assert torch.allclose(message[0].tensors["cluster_update"], (ups[0] + ups[1]) / 2)
    assert message[0].scalars["for_fit"] == 2


def test_a_client_applies_a_cluster_mean_only_for_its_latest_fit():
    params = {"convs.0.weight": torch.zeros(2, 2), "readout.weight": torch.ones(2)}
    setup = Setup(level="graph", num_clients=1, num_classes=2, initial_params=params,
                  options=get_algorithm("gcfl").options())
    client = GCFLClient(setup)
    ctx = SimpleNamespace(state={"params": params, "fits": 3})
    update = torch.arange(4.0)
    fresh = client.receive(params, Message({"cluster_update": update}, {"for_fit": 3}), ctx)
    assert fresh["convs.0.weight"].flatten().tolist() == [0.0, 1.0, 2.0, 3.0]
    assert torch.equal(fresh["readout.weight"], params["readout.weight"])
    # a mean computed from fit 2 (whose reply was dropped after the client moved on): ignored
    stale = client.receive(params, Message({"cluster_update": update}, {"for_fit": 2}), ctx)
    assert torch.equal(stale["convs.0.weight"], params["convs.0.weight"])


def test_gcfl_server_state_round_trips_through_a_checkpoint():
    server = _server("gcfl", warmup=0)
    server.aggregate_fit(1, _replies(_two_groups()))
    buffer = io.BytesIO()
    torch.save(server.state_dict(), buffer)
    buffer.seek(0)
    fresh = _server("gcfl", warmup=0)
    fresh.load_state_dict(safe_load(buffer.getvalue(), "server state"))
    assert fresh.clusters == server.clusters and len(fresh.clusters) == 2
    assert fresh.round_metrics() == server.round_metrics()
    before, after = server.configure_fit(2, list(range(6))), fresh.configure_fit(2, list(range(6)))
    for c in range(6):
        assert torch.equal(before[c].tensors["cluster_update"], after[c].tensors["cluster_update"])
        assert before[c].scalars == after[c].scalars


PROTOCOL = ["dataset=PROTEINS", "model=gin", "partition=gcfl_chunk", "partition.global_test=0.1",
            "partition.split=[0.9,0,0.1]", "num_clients=10", "rounds=3", "batch_size=128",
            "optimizer.lr=0.001", "device=cpu"]


@require("PROTEINS")
def test_one_cluster_moves_every_client_to_w0_plus_the_weighted_mean_update(monkeypatch):
    config = load_config(None, [*PROTOCOL, "algorithm=gcfl"])
    fed = build_federation(config, 0)
    runtime, client = fed.runtime, fed.runtime.client
    trained: dict[int, dict] = {}
    honest = client.local_train

    def recording(params, ctx, *args, **kwargs):
        out, stats = honest(params, ctx, *args, **kwargs)
        trained[ctx.client_id] = {k: v.clone() for k, v in out.items()}
        return out, stats

    monkeypatch.setattr(client, "local_train", recording)
    names = [k for k in client.setup.initial_params if k.startswith("convs.")]
    start = torch.cat([client.setup.initial_params[k].flatten() for k in names]).double()
    for rnd in (1, 2):
        fed.fit_round(rnd)
        sizes = {c: ctx.data.num_samples("train") for c, ctx in enumerate(runtime.contexts)}
        steps = {c: torch.cat([p[k].flatten() for k in names]).double() - start
                 for c, p in trained.items()}
        expected = start + sum(sizes[c] * steps[c] for c in steps) / sum(sizes.values())
        deployed = {c: client.current(runtime.server.configure_evaluate(rnd, [c])[c], ctx)
                    for c, ctx in enumerate(runtime.contexts)}
        for c, p in deployed.items():
            conv = torch.cat([p[k].flatten() for k in names]).double()
            assert torch.allclose(conv, expected, atol=1e-5)
            for k in p:  # the rest of the model is the client's own training
                if k not in names:
                    assert torch.equal(p[k], trained[c][k])
        assert not torch.equal(deployed[0]["readout.weight"], deployed[1]["readout.weight"])
        start = expected


@require("PROTEINS")
@pytest.mark.parametrize(("name", "options"), [
    ("gcfl", ["gcfl.warmup=1", "gcfl.eps1=100", "gcfl.eps2=0.0001"]),
    ("gcfl+", ["gcfl+.warmup=1", "gcfl+.eps1=100", "gcfl+.eps2=0.0001", "gcfl+.seq_length=2"]),
])
def test_three_rounds_on_proteins_record_and_apply_a_split(name, options):
    config = load_config(None, [*PROTOCOL, f"algorithm={name}", *options])
    fed = build_federation(config, 0)
    lines = [fed.fit_round(rnd) for rnd in (1, 2, 3)]
    json.dumps(lines)  # what metrics.jsonl records
    assert lines[0]["server"]["clusters"] == [list(range(10))]
    clusters = lines[1]["server"]["clusters"]  # forced split in round 2
    assert len(clusters) == 2 and sorted(c for part in clusters for c in part) == list(range(10))
    assert lines[2]["server"]["splits"][0] == 2
    runtime, client = fed.runtime, fed.runtime.client
    assert runtime.server.global_params() is None
    evaluation = fed.evaluate(3)
    assert "global_test_acc" not in evaluation and len(evaluation["clients"]) == 10
    convs = {c: flatten(client.current(runtime.server.configure_evaluate(3, [c])[c], ctx),
                        client.names) for c, ctx in enumerate(runtime.contexts)}
    for cluster in lines[2]["server"]["clusters"]:  # a cluster shares one convolution stack
        assert all(torch.allclose(convs[cluster[0]], convs[c]) for c in cluster[1:])
    first, second = lines[1]["server"]["clusters"]
    assert not torch.allclose(convs[first[0]], convs[second[0]])
