"""DP-FedAvg (graphfed.privacy.dp_fedavg) on Cora, 3 clients: clipping bounds every update,
sigma = 0 with a huge clip is uniform FedAvg, the noise has std sigma C / m, adaptive clipping
follows the norms, the local variant noises on the client, bad settings exit 2 with one line,
and Flower's simulation draws the same noise as in-process."""

from __future__ import annotations

import itertools
import json

import pytest
import torch

from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.mechanisms.updates import flatten
from graphfed.privacy import dp_fedavg
from graphfed.privacy.dp_fedavg import DPAggregator
from graphfed.privacy.options import DPOptions, update_noise_multiplier
from tests.conftest import refused_run, require

BASE = ["dataset=Cora", "algorithm=fedavg", "num_clients=3", "device=cpu", "local_epochs=2",
        "model.hidden=16", "checkpoint_every=0"]


def fitted(overrides: list[str], rounds: int = 3) -> list[dict[str, torch.Tensor]]:
    """The global model after each of ``rounds`` fit rounds (the initial one first)."""
    fed = build_federation(load_config(None, [*BASE, *overrides]), 0)
    server = fed.runtime.server
    models = [dict(server.global_params())]
    for rnd in range(1, rounds + 1):
        fed.fit_round(rnd)
        models.append(dict(server.global_params()))
    return models


def change(before: dict[str, torch.Tensor], after: dict[str, torch.Tensor]) -> float:
    names = list(before)
    return float((flatten(after, names).double() - flatten(before, names).double()).norm())


@require("Cora")
def test_clipping_bounds_every_update(monkeypatch):
    """Every client's update leaves the clip at norm <= C (instrumented), at least one was
    longer before, and with sigma = 0 the global model moves by at most C a round."""
    seen = []
    original = dp_fedavg.clip_rows

    def recording(updates, clip):
        clipped, norms = original(updates, clip)
        seen.append((clip, clipped.norm(dim=1), norms))
        return clipped, norms

    monkeypatch.setattr(dp_fedavg, "clip_rows", recording)
    models = fitted(["dp.noise_multiplier=0", "dp.clip=0.05"])
    assert len(seen) == 3 and all(len(after) == 3 for _, after, _ in seen)
    for clip, after, before in seen:
        assert (after <= clip * (1 + 1e-9)).all()
        assert (before > clip).any()
    for before, after in itertools.pairwise(models):
        assert 0 < change(before, after) <= 0.05 * (1 + 1e-6)


@require("Cora")
def test_zero_noise_and_a_huge_clip_is_uniform_fedavg():
    dp = fitted(["dp.noise_multiplier=0", "dp.clip=1e9"])
    uniform = fitted(["fedavg.weighted=false"])
    for a, b in zip(dp, uniform, strict=True):
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6)
    assert change(uniform[0], uniform[-1]) > 1e-2  # the rounds trained


def test_the_noise_has_std_sigma_clip_over_m():
    """The aggregation alone, many draws: (sum of clipped updates + N(0, (sigma C)^2)) / m
    with zero updates is noise of std sigma C / m around the current model."""
    options = DPOptions(noise_multiplier=2.0, clip=0.5)
    aggregator = DPAggregator(options, expected=4, num_clients=8)
    current = {"w": torch.full((50, 40), 3.0)}
    torch.manual_seed(0)
    draws = torch.stack([aggregator.average([current] * 4, current)["w"] - 3.0
                         for _ in range(200)])
    assert float(draws.std()) == pytest.approx(2.0 * 0.5 / 4, rel=0.01)
    assert abs(float(draws.mean())) < 0.002
    assert not torch.equal(draws[0], draws[1])  # every call draws afresh
    assert aggregator.release.sampling_rate == 0.5 and aggregator.release.noise_multiplier == 2.0


def test_adaptive_clipping_follows_the_target_quantile():
    """Andrew et al. Alg. 1 without noise: C moves geometrically towards the norms' median."""
    options = DPOptions(noise_multiplier=0.0, clip=1.0, clipping="adaptive", clip_lr=0.5)
    aggregator = DPAggregator(options, expected=4, num_clients=4)
    current = {"w": torch.zeros(10)}
    models = [{"w": torch.full((10,), n / 10 ** 0.5)} for n in (2.0, 3.0, 5.0, 7.0)]
    clips = []
    for _ in range(40):
        aggregator.average(models, current)
        clips.append(aggregator.clip)
    assert clips[0] == pytest.approx(1.0 * torch.e ** 0.25)  # none within: exp(-0.5 (0 - 0.5))
    assert 3.0 <= clips[-1] <= 5.0 * 1.3  # between the two middle norms, within one step


def test_adaptive_clipping_spends_part_of_sigma_on_the_count():
    options = DPOptions(noise_multiplier=1.0, clipping="adaptive")
    z = update_noise_multiplier(options, 100)  # sigma_b = 5
    assert z == pytest.approx((1.0 - 1 / 100) ** -0.5)
    with pytest.raises(ValueError, match="count_stddev"):
        update_noise_multiplier(options, 10)  # sigma_b = 0.5: 2 sigma_b is not above 1


@require("Cora")
def test_the_local_variant_noises_on_the_client():
    """dp.where=client: the server's mean is uniform and un-noised, the clients' replies carry
    the noise, so the global model moves although sigma C is tiny next to a huge clip."""
    local = fitted(["dp.noise_multiplier=0", "dp.clip=1e9", "dp.where=client"], rounds=2)
    uniform = fitted(["fedavg.weighted=false"], rounds=2)
    for a, b in zip(local, uniform, strict=True):
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=0, atol=1e-6)
    noised = fitted(["dp.noise_multiplier=1e-9", "dp.clip=1e5", "dp.where=client"], rounds=1)
    assert change(uniform[1], noised[1]) > 1e-5  # per-client noise of std 1e-4


BAD = [
    (["dp.noise_multiplier=-1"], "dp.noise_multiplier: Input should be greater than or equal"),
    (["dp.noise_multiplier=1", "dp.delta=1"], "dp.delta: Input should be less than 1"),
    (["dp.noise_multiplier=1", "dp.clip=0"], "dp.clip: Input should be greater than 0"),
    (["dp.enabled=true"], "dp.enabled needs dp.noise_multiplier"),
    (["dp.noise_multiplier=1", "aggregation.rule=median"],
     "aggregation.rule=median has no bounded sensitivity"),
    (["dp.noise_multiplier=1", "algorithm=local"],
     "dp (DP-FedAvg) applies to the averaging family"),
    (["dp.noise_multiplier=1", "dp.where=client", "dp.clipping=adaptive"],
     "dp.clipping=adaptive needs the server to count"),
    (["dp.noise_multiplier=1", "privacy.budget_epsilon=0.01"],
     "privacy.budget_epsilon=0.01: round 1 would bring epsilon to"),
    (["dp.noise_multiplier=1", "dp.clipping=adaptive", "dp.count_stddev=0.1"],
     "must exceed dp.noise_multiplier / 2"),
]


@require("Cora")
@pytest.mark.parametrize(("overrides", "message"), BAD)
def test_bad_dp_settings_are_one_line_and_exit_2(tmp_path, overrides, message):
    assert message in refused_run(tmp_path, *overrides)


@require("Cora")
def test_flower_simulation_draws_the_same_noise(tmp_path):
    pytest.importorskip("flwr", reason="Flower is not installed (pip install '.[flower]')")
    from graphfed.launch import run as run_experiment
    from tests.test_flower import ON_FLOWER, assert_same_run, config_of

    extra = ("dp.noise_multiplier=0.3", "dp.clip=0.5", "dp.clipping=adaptive",
             "dp.count_stddev=1")
    local, _ = run_experiment(config_of("fedavg-cora", *extra), tmp_path / "local",
                              progress=False)
    flower, _ = run_experiment(config_of("fedavg-cora", *extra, *ON_FLOWER),
                               tmp_path / "flower", progress=False)
    assert_same_run(local, flower)
    ledgers = [json.loads((d / "summary.json").read_text())["privacy"] for d in (local, flower)]
    assert ledgers[0] == ledgers[1] and ledgers[0]["epsilon"] > 0
