"""GCFL and GCFL+: cluster-wise averaging of the convolutions, the split rule, DTW."""

import numpy as np
import pytest
import torch

from graphfed.algorithms.base import Message, Setup, get_algorithm
from graphfed.algorithms.gcfl import dtw_distance
from graphfed.algorithms.updates import flatten
from graphfed.config import load_config
from graphfed.experiment import build_federation
from tests.conftest import require


def _server(name, n=6, dim=8, **options):
    algorithm = get_algorithm(name)
    params = {"convs.0.weight": torch.zeros(dim), "readout.weight": torch.zeros(2)}
    setup = Setup(level="graph", num_clients=n, num_classes=2, initial_params=params,
                  options=algorithm.options(**options))
    return algorithm.server(setup)


def _replies(updates, sizes=None):
    sizes = sizes or [10] * len(updates)
    return {c: Message({"update": u.float()}, {"num_samples": s})
            for c, (u, s) in enumerate(zip(updates, sizes, strict=True))}


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
def test_one_cluster_shares_convolutions_and_keeps_the_rest_personal(name):
    config = load_config(None, ["dataset=PROTEINS", f"algorithm={name}", "model=gin",
                                "partition=gcfl_chunk", "partition.chunk=20", "num_clients=4",
                                "batch_size=64", "device=cpu", "rounds=2"])
    fed = build_federation(config, 0)
    fed.fit_round(1)
    server, contexts = fed.runtime.server, fed.runtime.contexts
    assert server.global_params() is None
    client = fed.runtime.client
    deployed = [client.current(server.configure_evaluate(1, [c])[c], ctx)
                for c, ctx in enumerate(contexts)]
    convs = [flatten(p, client.names) for p in deployed]
    assert all(torch.allclose(convs[0], other) for other in convs[1:])
    assert not torch.equal(deployed[0]["readout.weight"], deployed[1]["readout.weight"])
    assert "global_test_acc" not in fed.evaluate(1)
