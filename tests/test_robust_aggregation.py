"""Byzantine-robust aggregation and the attack simulation: each rule's arithmetic on hand-made
tensors, the config's refusals, the attacking client (who attacks, what it sends, on both
engines), and on Cora that robust rules hold up under sign-flipping clients where the mean
does not."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
import torch

from graphfed.algorithms.averaging import fedavg
from graphfed.algorithms.registry import load_all
from graphfed.build import attackers
from graphfed.config import ConfigError, load_config
from graphfed.experiment import build_federation, run_experiment
from graphfed.mechanisms.aggregation import weighted_average
from graphfed.mechanisms.attacks import CLAIMED_SIZE, AttackOptions, choose_attackers, perturb
from graphfed.mechanisms.robust import (
    AggregationOptions,
    bucket_means,
    check_rule,
    robust_average,
    unusable_updates,
    update_norms,
)
from graphfed.messages import NUM_SAMPLES
from graphfed.runtime.attack import AttackingClient
from graphfed.seeding import seeded_call
from tests.conftest import refused_run, require

TINY = ["dataset=Cora", "partition=louvain", "num_clients=4", "local_epochs=1",
        "model.dropout=0", "device=cpu", "checkpoint_every=0"]
# the algorithms a robust rule applies to: the registry's averaging family
AVERAGING = sorted(name for name, a in load_all().items() if a.family == "averaging")


def _models(*rows: list[float]) -> list[dict[str, torch.Tensor]]:
    """One model per row: its first two values as a 2-vector ``w``, the rest as ``b``."""
    return [{"w": torch.tensor(r[:2], dtype=torch.float32),
             "b": torch.tensor(r[2:], dtype=torch.float32)} for r in rows]


def _rule(rule: str, **options) -> AggregationOptions:
    return AggregationOptions(rule=rule, **options)


# ------------------------------------------------------------------ the rules' arithmetic

def test_median_is_coordinate_wise_and_averages_the_middle_pair_for_even_counts():
    odd = robust_average(_models([1, 50, 0], [2, -3, 9], [100, 4, 5]), [1, 1, 1], _rule("median"))
    assert odd["w"].tolist() == [2, 4] and odd["b"].tolist() == [5]
    even = robust_average(_models([1, 0, 0], [3, 0, 0], [5, 0, 0], [1000, 0, 0]), [1, 1, 1, 1],
                          _rule("median"))
    assert even["w"].tolist() == [4, 0]


def test_median_ignores_claimed_sizes_and_keeps_dtypes():
    models = _models([1, 1, 1], [2, 2, 2], [3, 3, 3])
    models[2]["b"] = torch.tensor([7])  # an integer buffer comes back an integer
    for m in models[:2]:
        m["b"] = m["b"].long()
    out = robust_average(models, [1, 1, 1e12], _rule("median"))
    assert out["w"].tolist() == [2, 2] and out["b"].dtype == torch.long


def test_trimmed_mean_cuts_the_extremes_of_every_coordinate():
    rows = [[-100, 3, 0], [1, 1000, 0], [2, 5, 0], [3, 4, 0], [4, -7, 0]]
    out = robust_average(_models(*rows), [1] * 5, _rule("trimmed_mean", trim=0.2))
    assert out["w"].tolist() == pytest.approx([2.0, 4.0])  # (1+2+3)/3 and (3+4+5)/3
    untrimmed = robust_average(_models(*rows), [1] * 5, _rule("trimmed_mean", trim=0.0))
    assert untrimmed["w"].tolist() == pytest.approx([-18.0, 201.0])


def test_krum_picks_a_member_of_the_honest_cluster_and_multi_krum_averages_it():
    honest = [[1.0, 1.0, 0], [1.1, 0.9, 0], [0.9, 1.2, 0], [1.0, 0.8, 0], [1.2, 1.1, 0]]
    models = _models(*honest, [-40, 60, 0], [-41, 61, 0])  # two colluding outliers
    krum = robust_average(models, [1] * 7, _rule("krum"))
    assert krum["w"].tolist() in [pytest.approx(h[:2]) for h in honest]
    multi = robust_average(models, [1] * 7, _rule("multi_krum", multi_krum_m=5))
    assert multi["w"].tolist() == pytest.approx([1.04, 1.0])
    assert robust_average(models, [1] * 7, _rule("mean"))["w"][0] < -10


def test_krum_with_too_few_replies_falls_back_to_the_median(caplog):
    models = _models([0, 0, 0], [1, 1, 1], [10, 10, 10], [11, 11, 11])
    out = robust_average(models, [1] * 4, _rule("krum", byzantine=1))
    assert out["w"].tolist() == [5.5, 5.5] and "coordinate-wise median" in caplog.text


def test_norm_clip_bounds_each_update_against_the_global_model():
    current = {"w": torch.tensor([10.0, 10.0]), "b": torch.tensor([0.0])}
    models = _models([11, 10, 0], [10, 11, 0], [10 + 3000, 10 - 4000, 0])  # a 5000-norm update
    out = robust_average(models, [1, 1, 2], _rule("norm_clip", clip=2.0), current)
    assert (out["w"] - current["w"]).norm() <= 0.25 * 1 + 0.25 * 1 + 0.5 * 2.0 + 1e-6
    assert out["w"].tolist() == pytest.approx([10.25 + 0.6, 10.25 - 0.8])
    default = robust_average(models, [1, 1, 2], _rule("norm_clip"), current)  # median norm 1
    assert (default["w"] - current["w"]).norm() < 1.0


def test_mean_is_exactly_the_weighted_average():
    models = _models([1, 2, 3], [4, 5, 6], [7, 8, 10])
    mean, reference = robust_average(models, [1, 2, 3], _rule("mean")), weighted_average(
        models, [1, 2, 3])
    assert all(torch.equal(mean[k], reference[k]) for k in reference)


def test_impossible_krum_settings_are_refused_before_the_run():
    with pytest.raises(ValueError, match="n > 2f"):
        check_rule(_rule("krum", byzantine=2), 6)
    with pytest.raises(ValueError, match="at least 3"):
        check_rule(_rule("multi_krum"), 2)
    with pytest.raises(ValueError, match="multi_krum_m=9"):
        check_rule(_rule("multi_krum", multi_krum_m=9), 8)
    check_rule(_rule("krum", byzantine=2), 7)


def test_buckets_average_random_groups_and_keep_the_total_weight():
    torch.manual_seed(0)
    stacked = torch.arange(10.0, dtype=torch.float64).reshape(5, 2)
    weights = torch.tensor([1.0, 1.0, 2.0, 2.0, 4.0], dtype=torch.float64) / 10
    means, totals = bucket_means(stacked, weights, 2)
    assert means.shape == (3, 2) and torch.allclose(totals.sum(), torch.tensor(1.0).double())
    assert torch.allclose(totals @ means, weights @ stacked)  # the weighted mean is kept
    assert sorted(len(b) for b in torch.randperm(5).split(2)) == [1, 2, 2]


def test_bucketing_lets_the_median_keep_two_honest_groups_apart_from_an_attacker():
    """Two honest groups (non-IID clients) and one far attacker: the plain median lands on
    one group's value; with buckets of two it moves toward the honest mean and the attacker
    spoils at most one bucket."""
    rows = [[0.0, 0, 0], [0, 0, 0], [2, 0, 0], [2, 0, 0], [2, 0, 0], [0, 0, 0], [-100, 0, 0]]
    torch.manual_seed(3)
    bucketed = robust_average(_models(*rows), [1] * 7, _rule("median", bucket=2))
    plain = robust_average(_models(*rows), [1] * 7, _rule("median"))
    assert float(plain["w"][0]) == 0.0
    assert 0.0 < float(bucketed["w"][0]) <= 2.0


def test_update_norms_are_replies_minus_what_was_sent_and_overflow_in_float32():
    sent = {0: {"w": torch.tensor([1.0, 1.0]), "ids": torch.tensor([5])},
            1: {"w": torch.tensor([1.0, 1.0])}}
    replies = {0: {"w": torch.tensor([4.0, 5.0]), "ids": torch.tensor([9]),
                   "e": torch.tensor([0.0, 12.0], dtype=torch.float16)},  # not sent: as it is
               1: {"w": torch.tensor([3e38, -3e38])},  # finite values, a norm float32 lacks
               2: {"w": torch.tensor([float("nan"), 0.0])}}
    norms = update_norms(replies, sent)
    assert norms[0] == pytest.approx(13.0)  # sqrt(3² + 4² + 12²); integer tensors not counted
    assert norms[1] == float("inf") and norms[2] != norms[2]
    assert update_norms({0: {}}, {}) == {0: 0.0}


def test_unusable_updates_are_non_finite_or_far_above_the_rounds_median():
    norms = {0: 1.0, 1: 2.0, 2: 3.0, 3: 2.5e6, 4: float("inf")}
    assert set(unusable_updates(norms, 1e6)) == {3, 4}  # median 2 (of the finite norms)
    assert set(unusable_updates(norms, None)) == {4}
    assert unusable_updates({0: 1.0, 1: 1e36}, 1e6).keys() == {1}  # the lower median of two
    assert unusable_updates({0: 0.0, 1: 0.0, 2: 5.0}, 1e6) == {}  # a median of 0 bounds nothing
    assert unusable_updates({0: 3.5e38}, None).keys() == {0}  # above float32's largest value


# ------------------------------------------------------------------ config

BAD = [
    (["aggregation.rule=average"], "aggregation.rule: Input should be 'mean', 'median'"),
    (["aggregation.rule=median", "algorithm=local"],
     f"aggregation.rule=median applies to the averaging family ({', '.join(AVERAGING)}); "
     "algorithm 'local' is personalized"),
    (["aggregation.trim=0.5"], "aggregation.trim: Input should be less than 0.5"),
    (["aggregation.colour=1"],
     "aggregation.colour: unknown key; valid keys: bucket, byzantine, clip"),
    (["aggregation.rule=krum", "client_fraction=0.2"], "a round gives 2 (clients 2, bucket 1)"),
    (["aggregation.rule=krum", "aggregation.bucket=5"], "a round gives 2 (clients 10, bucket 5)"),
    (["aggregation.bucket=2"], "aggregation.bucket applies to the robust rules"),
    (["attack.kind=bogus"], "attack.kind: Input should be 'sign_flip', 'scale', 'random'"),
    (["attack.fraction=1.5"], "attack.fraction: Input should be less than or equal to 1"),
    (["attack.fraction=0.01"], "attack.fraction=0.01 of 10 clients rounds to no attacker"),
]


@require("Cora")
@pytest.mark.parametrize(("overrides", "message"), BAD)
def test_bad_robustness_settings_are_one_line_and_exit_2(tmp_path, overrides, message):
    assert message in refused_run(tmp_path, *overrides)


def test_a_robust_rule_reaches_the_server_and_any_algorithm_may_be_attacked():
    config = load_config(None, ["aggregation.rule=trimmed_mean", "aggregation.trim=0.1"])
    assert config.aggregation == AggregationOptions(rule="trimmed_mean", trim=0.1)
    load_config(None, ["algorithm=local", "attack.fraction=0.3", "attack.kind=scale"])
    with pytest.raises(ConfigError, match="averaging family"):
        load_config(None, ["algorithm=d-fedgnn", "aggregation.rule=norm_clip"])


@require("Cora")
@pytest.mark.parametrize("name", AVERAGING)
def test_every_averaging_algorithm_combines_its_replies_by_the_runs_rule(name, monkeypatch):
    """A robust rule is accepted for each member of the family and reaches the server's one
    combining step (``FedAvgServer.average``), which every averaging server goes through."""
    rules = []

    def recording(models, weights, options, current):
        rules.append(options.rule)
        return robust_average(models, weights, options, current)

    monkeypatch.setattr(fedavg, "robust_average", recording)
    config = load_config(None, ["dataset=Cora", "partition=metis", "num_clients=3", "rounds=1",
                                "device=cpu", f"algorithm={name}", "aggregation.rule=median",
                                *load_all()[name].small_run])
    fed = build_federation(config, 0)
    fed.setup()
    assert fed.fit_round(1)["dropped"] == {}
    assert rules and set(rules) == {"median"}, rules


# ------------------------------------------------------------------ who attacks, and how

def test_the_attackers_depend_on_the_seed_only():
    config = load_config(None, ["attack.fraction=0.3"])
    chosen = attackers(config, 5, 10)
    assert len(chosen) == 3 and chosen == sorted(set(chosen)) and max(chosen) < 10
    other = load_config(None, ["attack.fraction=0.3", "algorithm=fedprox", "rounds=3",
                               "attack.kind=random", "aggregation.rule=median", "seed=9"])
    assert attackers(other, 5, 10) == chosen == choose_attackers(10, 0.3, 5)
    assert len({tuple(choose_attackers(10, 0.3, s)) for s in range(10)}) > 3
    assert attackers(load_config(None, []), 5, 10) == []


def test_perturb_attacks_updates_of_received_models_and_other_float_tensors_themselves():
    received = {"w": torch.tensor([1.0, 1.0])}
    reply = {"w": torch.tensor([2.0, 0.0]), "extra": torch.tensor([0.5]),
             "ids": torch.tensor([3, 4])}
    flip = perturb(reply, received, AttackOptions(kind="sign_flip", scale=2.0),
                   torch.Generator())
    assert flip["w"].tolist() == [-1.0, 3.0] and flip["extra"].tolist() == [-1.0]
    assert torch.equal(flip["ids"], reply["ids"])
    scaled = perturb(reply, received, AttackOptions(kind="scale"), torch.Generator())
    assert scaled["w"].tolist() == [11.0, -9.0]  # default scale 10
    big = {"w": torch.zeros(20000)}
    noise = perturb({"w": torch.ones(20000)}, big, AttackOptions(kind="random", scale=3.0),
                    torch.Generator().manual_seed(0))["w"]
    assert noise.mean().abs() < 0.1 and noise.std() == pytest.approx(3.0, rel=0.03)


@require("Cora")
def test_the_attacking_client_sends_a_sign_flipped_update_only_for_the_chosen_clients():
    config = load_config(None, [*TINY, "attack.fraction=0.5", "attack.scale=3"])
    fed = build_federation(config, 0)
    client = fed.runtime.client
    assert isinstance(client, AttackingClient)
    chosen = attackers(config, 0, 4)
    messages = fed.runtime.server.configure_fit(1, [0, 1, 2, 3])
    for c, ctx in enumerate(fed.runtime.contexts):
        received = messages[c].tensors
        with seeded_call(0, 1, c, "fit"):
            sent = client.fit(messages[c], replace(ctx, state={}))
        with seeded_call(0, 1, c, "fit"):
            honest = client.inner.fit(messages[c], replace(ctx, state={}))
        assert sent.scalars == honest.scalars
        for name, value in honest.tensors.items():
            expected = received[name] - 3 * (value - received[name]) if c in chosen else value
            assert torch.allclose(sent.tensors[name], expected, atol=1e-6), (c, name)


@require("Cora")
def test_a_size_liar_claims_a_huge_size_and_sends_honest_tensors():
    config = load_config(None, [*TINY, "attack.fraction=0.25", "attack.kind=size_lie"])
    fed = build_federation(config, 0)
    (liar,) = attackers(config, 0, 4)
    message = fed.runtime.server.configure_fit(1, [liar])[liar]
    ctx = fed.runtime.contexts[liar]
    with seeded_call(0, 1, liar, "fit"):
        sent = fed.runtime.client.fit(message, replace(ctx, state={}))
    with seeded_call(0, 1, liar, "fit"):
        honest = fed.runtime.client.inner.fit(message, replace(ctx, state={}))
    assert sent.scalars[NUM_SAMPLES] == CLAIMED_SIZE != honest.scalars[NUM_SAMPLES]
    assert all(torch.equal(sent.tensors[k], v) for k, v in honest.tensors.items())


@require("Cora")
def test_a_size_liar_buys_no_weight_the_server_weighs_by_the_partition():
    """The server replaces every claimed size by the one the partition gives it, so size_lie
    attackers leave the aggregate as an honest round leaves it."""
    models = {}
    for attack in ("attack.fraction=0", "attack.fraction=0.5"):
        config = load_config(None, [*TINY, attack, "attack.kind=size_lie"])
        fed = build_federation(config, 0)
        fed.fit_round(1)
        models[attack] = fed.runtime.server.params
    honest, lied = models.values()
    assert all(torch.equal(honest[k], lied[k]) for k in honest)


@require("Cora")
def test_the_batched_engine_sends_what_the_sequential_one_sends_under_attack():
    """The attack applies in finish_step too, with the same seeded noise."""
    replies = {}
    for engine in ("sequential", "batched"):
        config = load_config(None, [*TINY, f"engine={engine}", "attack.fraction=0.5",
                                    "attack.kind=random"])
        fed = build_federation(config, 0)
        messages = fed.runtime.server.configure_fit(1, [0, 1, 2, 3])
        replies[engine], failed = fed.runtime.deliver_fit(1, messages)
        assert not failed
    chosen = attackers(config, 0, 4)
    start = fed.runtime.server.params
    moved = {}
    for c in range(4):
        one, other = replies["sequential"][c].tensors, replies["batched"][c].tensors
        for name in one:
            assert torch.allclose(one[name], other[name], atol=1e-4), (c, name)
        moved[c] = sum(float((one[k] - start[k]).norm()) for k in start)
    honest = max(moved[c] for c in range(4) if c not in chosen)
    assert all(moved[c] > 5 * honest for c in chosen), moved  # noise 10x the update's RMS


# ------------------------------------------------------------------ end to end on Cora

@require("Cora")
def test_robust_rules_hold_up_where_the_mean_falls_under_sign_flipping(tmp_path):
    """The quickstart on an IID (uniform) split, five rounds: with 2 of 10 clients sending
    -4x their update, the mean falls far below the clean run; the median, the trimmed mean and
    multi-Krum stay within 0.03 of it, Krum within 0.03 of its own clean run (it keeps one
    client's model, a tenth of the data, whether attacked or not).
    (On the quickstart's Louvain split the robust rules lose more: the attackers' own data and
    test sets are unlike the others', see docs/robustness.md.)"""
    common = ["partition=uniform", "rounds=5", "eval_every=5", "checkpoint_every=0",
              "device=cpu", "attack.scale=4"]

    def accuracy(name: str, *overrides: str) -> float:
        config = load_config("configs/quickstart.yaml", [*common, f"name={name}", *overrides])
        run_dir, summary = run_experiment(config, tmp_path, progress=False)
        seed = json.loads((run_dir / "seed-0" / "summary.json").read_text())
        assert seed.get("attackers", []) == attackers(config, 0, 10)
        return summary["final"]["test_acc"]

    clean = accuracy("clean")
    attacked = ["attack.fraction=0.2", "attack.kind=sign_flip"]
    mean = accuracy("mean", *attacked)
    assert mean < clean - 0.2, (clean, mean)  # measured: 0.713 clean, 0.235 attacked
    for rule in ("median", "trimmed_mean", "multi_krum"):  # 0.698, 0.689, 0.716
        robust = accuracy(rule, *attacked, f"aggregation.rule={rule}")
        assert robust > clean - 0.03, (rule, clean, robust)
    # Krum keeps one client's model, a tenth of the data: 0.595 with or without the attack
    krum_clean = accuracy("krum-clean", "aggregation.rule=krum")
    krum = accuracy("krum", *attacked, "aggregation.rule=krum")
    assert abs(krum - krum_clean) < 0.03 and krum > mean + 0.2, (krum_clean, krum)
