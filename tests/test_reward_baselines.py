"""CGSV, EU, DW and RFFL: the valuations they plug into the shared reward protocol."""

import pytest
import torch

from graphfed.algorithms.registry import get_algorithm
from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.messages import Message
from graphfed.protocol import Setup
from tests.conftest import require


def _server(name, n=4, dim=10, **options):
    algorithm = get_algorithm(name)
    setup = Setup(level="graph", num_clients=n, num_classes=2,
                  initial_params={"w": torch.zeros(dim)}, options=algorithm.options(**options))
    return algorithm.server(setup)


def _round(server, rnd, updates, sizes=None):
    sizes = sizes or [10] * len(updates)
    server.aggregate_fit(rnd, {c: Message({"update": u.float()}, {"num_samples": s})
                               for c, (u, s) in enumerate(zip(updates, sizes, strict=True))})
    return server.round_metrics()


def _honest_and_adversary(rnd_seed=0, dim=10):
    torch.manual_seed(rnd_seed)
    direction = torch.randn(dim)
    honest = [direction + 0.1 * torch.randn(dim) for _ in range(3)]
    return [u / u.norm() for u in honest] + [-direction / direction.norm()]


def test_dw_values_are_data_shares_and_weigh_the_aggregate_like_fedavg():
    server = _server("dw")
    updates = [torch.eye(10)[i] for i in range(4)]
    metrics = _round(server, 1, updates, sizes=[10, 20, 30, 40])
    assert metrics["values"] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert metrics["weights"] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert metrics["reward_components"][3] == 10


@pytest.mark.parametrize("name", ["cgsv", "eu"])
def test_cgsv_and_eu_value_the_aligned_agents_above_an_adversary(name):
    server = _server(name)
    for rnd in range(1, 30):
        metrics = _round(server, rnd, _honest_and_adversary(rnd))
    values = metrics["values"]
    assert sum(values) == pytest.approx(1.0)
    assert values[3] < min(values[:3])
    assert metrics["reward_components"][3] < min(metrics["reward_components"][:3])


def test_eu_similarity_decreases_with_distance():
    server = _server("eu")
    aggregate = torch.tensor([1.0, 0.0])
    near, far = torch.tensor([0.9, 0.1]), torch.tensor([-1.0, 0.0])
    sim = server.similarity(torch.stack([near, far]), aggregate, torch.zeros(2))
    assert sim[0] > sim[1] > 0


def test_rffl_removes_an_adversary_for_good():
    server = _server("cffl")
    for rnd in range(1, 40):
        metrics = _round(server, rnd, _honest_and_adversary(rnd))
    assert not bool(server.reputable[3]) and bool(server.reputable[:3].all())
    assert metrics["values"][3] == 0 and metrics["reward_components"][3] == 0
    assert metrics["weights"][3] == 0
    # rewards are proportional to reputation (RFFL), not tanh-shaped
    top = max(metrics["values"])
    for value, count in zip(metrics["values"][:3], metrics["reward_components"][:3], strict=True):
        assert count == int(10 * value / top)


def test_rffl_rewards_follow_beta_only_with_the_tanh_shape():
    """FGFL's beta sweep needs CFFL's rewards sized by tanh(beta r), as its code does."""
    dim = 1000
    common = torch.ones(dim)
    updates = [common + 3.0 * i * torch.eye(dim)[i] for i in range(4)]

    def counts(**options):
        server = _server("cffl", dim=dim, **options)
        return [_round(server, rnd, updates)["reward_components"] for rnd in range(1, 20)][-1]

    linear = counts(beta=0.5)
    assert linear == counts(beta=2.0) and len(set(linear)) > 1
    low, high = counts(reward_shape="tanh", beta=0.5), counts(reward_shape="tanh", beta=2.0)
    # tanh saturates: a larger beta brings every agent closer to the top agent's full share
    assert all(h >= lo >= li for h, lo, li in zip(high, low, linear, strict=True))
    assert high != low


@require("PROTEINS")
@pytest.mark.parametrize("name", ["cgsv", "dw", "eu", "cffl"])
def test_reward_methods_run_and_keep_personal_models(name):
    config = load_config(None, ["dataset=PROTEINS", f"algorithm={name}", "model=gin",
                                "partition=gcfl_chunk", "partition.global_test=0.1",
                                "num_clients=4", "partition.chunk=20", "batch_size=64",
                                "device=cpu", "rounds=2"])
    fed = build_federation(config, 0)
    for rnd in (1, 2):
        fed.fit_round(rnd)
    result = fed.evaluate(2)
    assert 0.0 <= result["test_acc"] <= 1.0 and "global_test_acc" in result
    states = [ctx.state["params"] for ctx in fed.runtime.contexts]
    assert any(not torch.equal(states[0][k], states[1][k]) for k in states[0])


@require("PROTEINS")
def test_global_model_can_be_the_mean_of_the_agents_models():
    config = load_config(None, ["dataset=PROTEINS", "algorithm=cgsv", "model=gin",
                                "partition=gcfl_chunk", "num_clients=3", "partition.chunk=20",
                                "device=cpu", "rounds=1", "cgsv.global_model=mean_of_agents"])
    fed = build_federation(config, 0)
    fed.fit_round(1)
    models = [ctx.state["params"] for ctx in fed.runtime.contexts]
    for name, value in fed.runtime.server.global_params().items():
        assert torch.allclose(value, sum(m[name] for m in models) / 3, atol=1e-6)


@pytest.mark.parametrize(("apply", "moved"), [("add_to_local", True), ("discard", False)])
def test_a_discarded_reward_reaches_the_agent_but_not_its_model(apply, moved):
    from graphfed.mechanisms.sparse_rewards import encode_sparse

    algorithm = get_algorithm("dw")
    setup = Setup(level="graph", num_clients=2, num_classes=2,
                  initial_params={"w": torch.zeros(4)},
                  options=algorithm.options(reward_apply=apply))
    client = algorithm.client(setup)
    reward = Message(encode_sparse(torch.tensor([1, 3], dtype=torch.int32),
                                   torch.tensor([0.5, -0.25]), 4))
    received = client.receive({"w": torch.ones(4)}, reward, ctx=None)["w"]
    assert torch.equal(received, torch.tensor([1.0, 1.5, 1.0, 0.75]) if moved
                       else torch.ones(4))
