"""The privacy ledger (graphfed.privacy.ledger): DP-FedAvg's epsilon equals dp-accounting's
for the same (sigma, q, rounds, delta), a budget stops a run before the round that would exceed
it (and a resume does not run it), FedEgo's and FairGFL's releases appear with what their runs
recorded, and a missing dp-accounting is one clear line."""

from __future__ import annotations

import json
import logging
import sys

import dp_accounting as dp
import pytest

from graphfed.algorithms.fairgfl import FAIRGFL
from graphfed.config import load_config
from graphfed.errors import GraphfedError
from graphfed.experiment import resume_experiment, run_experiment
from graphfed.privacy.accounting import gaussian_epsilon, pld_interval
from graphfed.privacy.ledger import Release, round_releases
from tests.conftest import require

logging.getLogger("absl").setLevel(logging.ERROR)  # RDP orders it leaves out, each logged
SIGMA, DELTA = 1.1, 1e-5
BASE = ["dataset=Cora", "algorithm=fedavg", "num_clients=3", "client_fraction=0.67",
        "device=cpu", "local_epochs=1", "model.hidden=16", f"dp.noise_multiplier={SIGMA}",
        f"dp.delta={DELTA}"]


def direct(rounds: int, accountant: str = "rdp", sigma: float = SIGMA, q: float = 2 / 3
           ) -> float:
    """epsilon of ``rounds`` Poisson-sampled Gaussian rounds, straight from dp-accounting."""
    event = dp.SelfComposedDpEvent(dp.PoissonSampledDpEvent(q, dp.GaussianDpEvent(sigma)),
                                   rounds)
    ledger = dp.rdp.RdpAccountant() if accountant == "rdp" else dp.pld.PLDAccountant()
    return float(ledger.compose(event).get_epsilon(DELTA))


def test_pld_of_small_noise_coarsens_its_grid_and_stays_near_its_fine_value():
    """σ = 0.1 over 20 rounds (RDP epsilon about 1,060): the default grid would hold the PLD's
    whole loss range point by point (half a minute, a gigabyte; σ = 0.03 exhausts memory), the
    coarsened one answers at once and stays within 0.01 % of the fine value, below RDP's."""
    rdp = gaussian_epsilon([(0.1, 0.5, 20)], DELTA, "rdp")
    pld = gaussian_epsilon([(0.1, 0.5, 20)], DELTA, "pld")
    assert pld_interval(rdp) == pytest.approx(1e-4 * rdp / 10)
    assert pld_interval(5.0) == 1e-4
    fine = 969.50180007  # dp-accounting's PLDAccountant() at its default interval, measured
    assert pld == pytest.approx(fine, rel=1e-4)
    assert pld < rdp


def read(path) -> dict:
    return json.loads(path.read_text())


def metric_rounds(run_dir) -> list[int]:
    text = (run_dir / "seed-0" / "metrics.jsonl").read_text()
    return [json.loads(line)["round"] for line in text.splitlines()]


@require("Cora")
def test_dp_fedavg_epsilon_equals_dp_accountings(tmp_path):
    config = load_config(None, [*BASE, "rounds=3", "name=dp"])
    run_dir, summary = run_experiment(config, tmp_path, progress=False)
    ledger = summary["privacy"]
    assert ledger["delta"] == DELTA and ledger["accountant"] == "rdp"
    assert ledger["epsilon"] == pytest.approx(direct(3), rel=1e-9)
    assert ledger["epsilon_by_accountant"]["pld"] == pytest.approx(direct(3, "pld"), rel=1e-6)
    assert [r["epsilon"] for r in ledger["by_round"]] == pytest.approx(
        [direct(k) for k in (1, 2, 3)], rel=1e-9)
    update = ledger["by_message"]["dp_fedavg.update"]
    assert update["noise_multiplier"] == SIGMA and update["sampling_rate"] == pytest.approx(2 / 3)
    assert update["releases"] == 3
    assert read(run_dir / "seed-0" / "summary.json")["privacy"]["epsilon"] == ledger["epsilon"]


@require("Cora")
def test_a_budget_stops_the_run_before_the_round_that_would_exceed_it(tmp_path, capsys):
    budget = (direct(2) + direct(3)) / 2  # rounds 1 and 2 fit, round 3 would not
    config = load_config(None, [*BASE, "rounds=6", "eval_every=3", "checkpoint_every=1",
                                f"privacy.budget_epsilon={budget}", "name=budget"])
    run_dir, summary = run_experiment(config, tmp_path, progress=False)
    assert "round 3 would bring epsilon to" in capsys.readouterr().out
    assert metric_rounds(run_dir) == [1, 2]
    seed = read(run_dir / "seed-0" / "summary.json")
    assert seed["stopped"]["round"] == 3 and seed["rounds"] == 2
    assert seed["final"]["test_acc"] > 0  # round 2, not an eval round, evaluated at the stop
    assert summary["privacy"]["epsilon"] == pytest.approx(direct(2))
    assert (run_dir / "seed-0" / "checkpoint.pt").exists()  # the model it stopped with
    resume_experiment(run_dir, progress=False)  # a finished seed: nothing more runs
    assert metric_rounds(run_dir) == [1, 2]
    for path in (run_dir / "summary.json", run_dir / "seed-0" / "summary.json"):
        path.unlink()  # as if the run had died after round 2's checkpoint
    _, again = resume_experiment(run_dir, progress=False)
    assert metric_rounds(run_dir) == [1, 2]
    assert again["privacy"]["epsilon"] == pytest.approx(direct(2))
    assert again["stopped"]["0"]["round"] == 3


@require("Cora")
def test_fairgfl_ldp_appears_with_the_epsilon_its_run_recorded(tmp_path):
    config = load_config(None, ["dataset=Cora", "algorithm=fairgfl", "num_clients=3",
                                "rounds=2", "device=cpu", "fairgfl.eps_v=2", "fairgfl.eps_e=1.5",
                                "fairgfl.permanent=false", *FAIRGFL.small_run, "name=fair"])
    run_dir, summary = run_experiment(config, tmp_path, progress=False)
    last = [json.loads(x) for x in
            (run_dir / "seed-0" / "metrics.jsonl").read_text().splitlines()][-1]["server"]
    by_message = summary["privacy"]["by_message"]
    assert by_message["fairgfl.features"]["epsilon"] == pytest.approx(last["eps_node"])
    assert by_message["fairgfl.links"]["epsilon"] == pytest.approx(last["eps_link"])
    assert last["eps_link"] == pytest.approx(2 * 1.5)  # no permanent response: two releases
    assert summary["privacy"]["epsilon"] == pytest.approx(last["eps_node"] + last["eps_link"])


@require("Cora")
def test_fedego_gaussian_noise_is_recorded_unbounded(tmp_path):
    config = load_config(None, ["dataset=Cora", "algorithm=fedego", "num_clients=3",
                                "rounds=1", "device=cpu", "partition=fedego_label",
                                "partition.client_size=0.3", "model.hidden=16",
                                "sampling.train_fraction=0.2", "fedego.noise_sigma=0.1",
                                "name=ego"])
    _, summary = run_experiment(config, tmp_path, progress=False)
    ledger = summary["privacy"]
    entry = ledger["by_message"]["fedego.embeddings"]
    assert entry["releases"] == 3 and entry["epsilon"] is None and "noise std 0.1" in entry["note"]
    assert ledger["epsilon"] is None and ledger["unbounded"] == ["fedego.embeddings"]


def test_cumulative_releases_cost_their_increase_and_pure_adds_to_gaussian():
    lines = [{"round": r, "privacy": [Release("ldp", "pure", epsilon=e, cumulative=True)
                                      .to_dict(),
                                      Release("g", "gaussian", noise_multiplier=2.0).to_dict()]}
             for r, e in ((1, 1.0), (2, 1.0), (3, 2.5))]
    costs = [[r.epsilon for r in rs if r.mechanism == "pure"] for _, rs in round_releases(lines)]
    assert costs == [[1.0], [0.0], [1.5]]
    from graphfed.privacy.ledger import epsilon

    every = [r for _, rs in round_releases(lines) for r in rs]
    assert epsilon(every, DELTA) == pytest.approx(2.5 + gaussian_epsilon([(2.0, 1.0, 3)], DELTA))


def test_missing_dp_accounting_is_one_clear_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "dp_accounting", None)
    with pytest.raises(GraphfedError, match=r"pip install 'graphfed\[privacy\]'"):
        gaussian_epsilon([(1.0, 1.0, 1)], DELTA)


@require("Cora")
def test_dp_tradeoff_reports_each_noise_level_with_the_epsilon_its_runs_recorded(tmp_path,
                                                                                  monkeypatch):
    """The privacy-utility preset: a row of ε per noised variant, equal to the seed's own ledger
    total, none for FedAvg without noise, and the curve drawn from the table."""
    from graphfed.reproduce import get_preset, reproduce

    monkeypatch.setattr(get_preset("dp-tradeoff"), "quick", ["rounds=2", "eval_every=2"])
    noised = "dp-fedavg[sigma=1]"
    out, rows, skipped = reproduce("dp-tradeoff", methods=["fedavg[uniform]", noised],
                                   datasets=["Cora"], seeds=1, quick=True, out=tmp_path / "r",
                                   progress=False)
    assert not skipped
    epsilons = {r["method"]: r["ours_mean"] for r in rows if r["metric"] == "epsilon"}
    assert set(epsilons) == {noised}
    seed_dirs = list((out / "runs").glob("dp-fedavg*/seed-0"))
    assert len(seed_dirs) == 1
    assert epsilons[noised] == read(seed_dirs[0] / "summary.json")["privacy"]["epsilon"]
    assert epsilons[noised] == pytest.approx(direct(2, sigma=1.0, q=0.5), rel=1e-6)
    assert {r["method"] for r in rows if r["metric"] == "test_acc_pooled"} == {
        "fedavg[uniform]", noised}
    assert (out / "privacy_curve.png").stat().st_size > 0
