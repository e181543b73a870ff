"""``graphfed audit``: the attacks' scores and ROC numbers on hand-made examples, the attacks on
small real runs (an over-fitted Local model leaks membership, a GCN on Cora leaks its edges),
the LiRA shadow cache, a run on Flower audited as its in-process twin, and bad input refused in
one line."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from graphfed.audit.link import correlation, non_edges, undirected_edges
from graphfed.audit.lira import cache_path, lira_scores, shadow_data
from graphfed.audit.mia import loss_scores
from graphfed.audit.scoring import attack_result, logit_confidence
from graphfed.audit.target import item_ids
from graphfed.build import federated_data
from graphfed.checkpoints import fingerprint
from graphfed.cli import app
from graphfed.config import ConfigError, load_config
from graphfed.experiment import FINAL, resume_experiment, run_experiment
from graphfed.launch import run as launch
from graphfed.serialization import graph_classes, safe_load
from tests.conftest import error_line, require

# few training nodes, many epochs, no regularisation: a Local model that memorises them
OVERFIT = ["configs/quickstart.yaml", "algorithm=local", "num_clients=3", "rounds=2",
           "local_epochs=30", "partition.split=[0.1,0.45,0.45]", "model.dropout=0",
           "optimizer.weight_decay=0", "eval_every=2", "engine=sequential"]
SHORT = ["configs/quickstart.yaml", "num_clients=3", "rounds=2", "eval_every=2"]
# one recipe on both runtimes: the sequential engine (Flower's), a small model
TWINS = [*SHORT, "model.hidden=16", "engine=sequential", "device=cpu", "checkpoint_every=0"]
# a simulated node's first answer waits for its actor to import torch and graphfed
ON_FLOWER = ["runtime=flower-sim", "flower.connect_timeout=600"]


def invoke(*args: str):
    return CliRunner().invoke(app, ["audit", *args])


def finished(tmp_path_factory, name: str, args: list[str]) -> Path:
    run_dir, _ = run_experiment(load_config(args[0], [*args[1:], f"name={name}"]),
                                tmp_path_factory.mktemp(name), progress=False)
    return run_dir


def final_state(run_dir: Path) -> dict:
    return safe_load(run_dir / "seed-0" / FINAL, "checkpoint", graph_classes())


@pytest.fixture(scope="module")
def overfit(tmp_path_factory) -> Path:
    return finished(tmp_path_factory, "overfit", OVERFIT)


@pytest.fixture(scope="module")
def short(tmp_path_factory) -> Path:
    return finished(tmp_path_factory, "short", SHORT)


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> tuple[Path, Path]:
    """The same FedAvg run of Cora in-process and on Flower's simulation engine (Ray)."""
    pytest.importorskip("flwr", reason="Flower is not installed (pip install '.[flower]')")
    in_process = finished(tmp_path_factory, "twin", TWINS)
    flower, _ = launch(load_config(TWINS[0], [*TWINS[1:], *ON_FLOWER, "name=twin"]),
                       tmp_path_factory.mktemp("flower"), progress=False)
    return in_process, flower


# ----------------------------------------------------------------- hand-made examples

def test_auc_and_tpr_at_1pct_fpr_of_a_hand_ranked_example():
    # ranked: + + - + - -  -> 8 of the 9 (member, non-member) pairs ordered right; the two
    # top-scored members are flagged before any non-member: TPR 2/3 at FPR 0
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5, 0.4])
    members = np.array([1, 1, 0, 1, 0, 0], bool)
    result = attack_result("x", scores, members, "given")
    assert result.auc == pytest.approx(8 / 9)
    assert result.tpr_at_1pct_fpr == pytest.approx(2 / 3)
    assert (result.members, result.non_members) == (3, 3)


def test_tied_scores_are_one_threshold_not_a_made_up_order():
    # a member and a non-member tie at the top: flagging either flags both (FPR 1/2), so no
    # threshold reaches any TPR at FPR <= 1 %; the tie counts half in the AUC
    result = attack_result("x", np.array([1.0, 1.0, 0.0]), np.array([1, 0, 0], bool), "given")
    assert result.auc == pytest.approx(0.75)
    assert result.tpr_at_1pct_fpr == 0.0
    assert result.roc.fpr.tolist() == [0.0, 0.5, 1.0]
    assert result.roc.tpr.tolist() == [0.0, 1.0, 1.0]


def test_the_loss_threshold_scores_minus_the_cross_entropy():
    member_logits = torch.tensor([[2.0, 0.0], [0.0, 1.0]])
    other_logits = torch.tensor([[0.0, 2.0]])
    scores, positive = loss_scores(member_logits, torch.tensor([0, 1]), other_logits,
                                   torch.tensor([0]))
    assert scores == pytest.approx([-math.log(1 + math.exp(-2)), -math.log(1 + math.exp(-1)),
                                    -math.log(1 + math.exp(2))])
    assert positive.tolist() == [True, True, False]


def test_lira_confidence_and_score_by_hand():
    # p = e^2 / (e^2 + 2): log(p / (1 - p)) = 2 - log 2, also where p rounds to 1 in float32
    assert float(logit_confidence(torch.tensor([[2.0, 0.0, 0.0]]), torch.tensor([0]))) \
        == pytest.approx(2 - math.log(2))
    assert float(logit_confidence(torch.tensor([[60.0, 0.0]]), torch.tensor([0]))) \
        == pytest.approx(60.0)
    # two shadows: mu = (2, 1), per-candidate variances 2 and 2, pooled 2
    scores = lira_scores(np.array([3.0, 0.0]), np.array([[1.0, 0.0], [3.0, 2.0]]))
    assert scores == pytest.approx([1 / math.sqrt(2), -1 / math.sqrt(2)])


def test_link_stealing_correlates_the_two_nodes_posteriors():
    # row 1 equals row 0; row 2 is 2/3 minus row 0 (a probability row too): correlation -1
    p = np.array([[0.5, 0.3, 0.2], [0.5, 0.3, 0.2], [1 / 6, 11 / 30, 7 / 15], [1 / 3] * 3])
    pairs = np.array([[0, 1], [0, 2], [0, 3]])
    assert correlation(p, pairs) == pytest.approx([1.0, -1.0, 0.0])  # a flat row: 0
    edges = undirected_edges(torch.tensor([[0, 1, 1, 2, 2], [1, 0, 2, 1, 2]]))
    assert edges.tolist() == [[0, 1], [1, 2]]  # both directions once, the self-loop left out
    others = non_edges(edges, 4, 10, np.random.default_rng(0))
    assert sorted(map(tuple, others.tolist())) == [(0, 2), (0, 3), (1, 3), (2, 3)]  # all 4


# ----------------------------------------------------------------- real runs

@require("Cora")
def test_an_overfitted_local_model_leaks_membership(overfit):
    assert (overfit / "seed-0" / FINAL).is_file()  # a finished seed keeps its final state
    result = invoke(str(overfit), "--attack", "mia", "--json")
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert set(out) == {"run", "seed", "target", "target_model", "attacks"}
    assert out["target"] == "deployed"  # Local has no global model
    (mia,) = out["attacks"]
    assert set(mia) == {"attack", "auc", "tpr_at_1pct_fpr", "members", "non_members",
                        "threat_model"}
    assert mia["members"] == mia["non_members"] > 0
    assert mia["auc"] > 0.65, mia
    written = json.loads((overfit / "seed-0" / "audit" / "audit.json").read_text())
    assert written["attacks"] == out["attacks"]


@require("Cora")
def test_lira_trains_its_shadows_once_and_separates_an_overfitted_model(overfit, tmp_path):
    first = invoke(str(overfit), "--attack", "lira", "--shadows", "2", "--json")
    assert first.exit_code == 0, first.output
    assert first.stderr.count("training shadow federation") == 2
    assert cache_path(overfit / "seed-0", 1).is_file()
    plot = tmp_path / "roc.png"
    again = invoke(str(overfit), "--attack", "lira", "--shadows", "2", "--json",
                   "--plot", str(plot))
    assert again.exit_code == 0, again.output
    assert "training shadow" not in again.stderr  # both read back from audit/
    assert json.loads(again.stdout) == json.loads(first.stdout)
    assert json.loads(first.stdout)["attacks"][0]["auc"] > 0.6
    assert plot.stat().st_size > 0


@require("Cora")
def test_link_stealing_finds_the_edges_of_a_gcn_on_cora(short):
    result = invoke(str(short), "--attack", "link,mia")
    assert result.exit_code == 0, result.output
    assert "attacks on the final global model" in " ".join(result.stdout.split())
    out = json.loads((short / "seed-0" / "audit" / "audit.json").read_text())
    link = {a["attack"]: a for a in out["attacks"]}["link"]
    assert link["members"] == link["non_members"] > 100
    assert link["auc"] > 0.7, link


@require("Cora")
def test_a_flower_run_is_audited_as_its_in_process_twin(twins):
    """A Flower run's final.pt keeps its server's state only: the global model it released is
    attacked on the partition rebuilt in-process, with the numbers the in-process run's audit
    gives, to the last digit."""
    assert "clients" not in final_state(twins[1])["runtime"]
    audits = []
    for run_dir in twins:
        result = invoke(str(run_dir), "--attack", "mia,link", "--json")
        assert result.exit_code == 0, result.output
        audits.append(json.loads(result.stdout))
    assert audits[1]["target"] == "global"
    assert [a["attack"] for a in audits[1]["attacks"]] == ["mia", "link"]
    assert audits[1]["attacks"] == audits[0]["attacks"]
    assert all(a["members"] > 0 for a in audits[1]["attacks"])


@require("Cora")
def test_a_flower_run_still_cannot_be_resumed(twins):
    with pytest.raises(ConfigError, match="--resume works on runtime=simulation only"):
        resume_experiment(twins[1], progress=False)


@require("Cora")
def test_a_flower_final_pt_of_another_config_is_one_line(twins, tmp_path):
    run_dir = tmp_path / "edited"
    shutil.copytree(twins[1], run_dir)
    config = run_dir / "config.yaml"
    config.write_text(config.read_text().replace("hidden: 16", "hidden: 32"))
    line = error_line(invoke(str(run_dir), "--attack", "mia"))
    assert f"{FINAL} belongs to another run: its config has model.hidden=16 (this run: 32)" \
        in line


@require("Cora")
def test_a_personalised_flower_run_is_one_line(overfit, tmp_path):
    """Local releases each client's own model; on Flower those stayed on the clients' nodes
    and its final.pt (here the in-process one, stamped as a Flower run's) cannot rebuild
    them."""
    run_dir = tmp_path / "local-on-flower"
    shutil.copytree(overfit, run_dir, ignore=shutil.ignore_patterns("audit"))
    text = (run_dir / "config.yaml").read_text()
    assert "runtime: simulation" in text
    (run_dir / "config.yaml").write_text(text.replace("runtime: simulation",
                                                      "runtime: flower-sim"))
    config = load_config(run_dir / "config.yaml")
    state = final_state(run_dir)
    state["fingerprint"] = fingerprint(config, 0, federated_data(config, 0))
    torch.save(state, run_dir / "seed-0" / FINAL)
    line = error_line(invoke(str(run_dir), "--attack", "mia"))
    assert "local has no global model" in line and "stayed on the clients' nodes" in line


# ----------------------------------------------------------------- bad input

@require("Cora")
@pytest.mark.parametrize(("args", "expected"), [
    (["--attack", "steal"], "--attack steal: unknown attack; choose from mia, lira, link"),
    (["--seed", "3"], "--seed 3:"),
    (["--attack", "lira", "--shadows", "1"], "--shadows 1:"),
    (["--plot", "roc.nope"], "--plot roc.nope: the extension names the image format"),
])
def test_bad_options_are_one_line(short, args, expected):
    assert expected in error_line(invoke(str(short), *args))


def test_a_directory_that_is_no_run_is_one_line(tmp_path):
    assert "is not a graphfed run directory" in error_line(invoke(str(tmp_path / "nothing")))


@require("Cora")
def test_an_unfinished_seed_is_one_line(short, tmp_path):
    run_dir = tmp_path / "copy"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text((short / "config.yaml").read_text())
    assert "is not finished (no summary.json)" in error_line(invoke(str(run_dir)))
    (run_dir / "seed-0").mkdir()
    (run_dir / "seed-0" / "summary.json").write_text("{}")  # finished, its final.pt lost
    assert f"keeps no {FINAL}" in error_line(invoke(str(run_dir)))


@require("MUTAG")
def test_a_graph_level_run_is_audited_by_membership_not_link_stealing(tmp_path_factory):
    run_dir = finished(tmp_path_factory, "mutag", [None, "dataset=MUTAG", "partition=dirichlet",
                                                   "model=gin", "num_clients=3", "rounds=1"])
    line = error_line(invoke(str(run_dir), "--attack", "link"))
    assert "--attack link applies to node-level runs; this is a graph-level run" in line
    result = invoke(str(run_dir), "--shadows", "2", "--json")  # default: what applies
    assert result.exit_code == 0, result.output
    attacks = json.loads(result.stdout)["attacks"]
    assert [a["attack"] for a in attacks] == ["mia", "lira"]
    assert all(a["members"] == a["non_members"] > 0 for a in attacks)


@pytest.mark.parametrize("dataset", [
    pytest.param(["dataset=Cora", "partition.split=[0.1,0.45,0.45]"], marks=require("Cora")),
    pytest.param(["dataset=MUTAG", "partition=dirichlet"], marks=require("MUTAG")),
])
def test_shadows_train_on_held_out_items_only(dataset):
    data = federated_data(load_config(None, [*dataset, "num_clients=3"]), 0)
    candidates = torch.cat([item_ids(c, s) for c in data.clients for s in ("train", "test")])
    shadow = shadow_data(data, np.random.default_rng(0))
    for raw, held in zip(data.clients, shadow.clients, strict=True):
        trained = item_ids(held, "train")
        assert 0 < len(trained) <= raw.num_samples("train")
        assert set(trained.tolist()) <= set(item_ids(raw, "val").tolist())
        assert not set(trained.tolist()) & set(candidates.tolist())  # every candidate OUT
        own = torch.cat([item_ids(raw, "train"), item_ids(raw, "test")])
        assert set(own.tolist()) <= set(item_ids(held, "test").tolist())  # scored there
