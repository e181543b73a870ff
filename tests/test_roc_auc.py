"""ROC-AUC of binary tasks: the rank-based function by hand, per client and per run on real
binary data, the same on both engines, bounded at the boundary, and absent from multi-class
runs."""

import json

import numpy as np
import pytest
import torch
from torch.func import functional_call

from graphfed.config import load_config
from graphfed.evaluation import self_reported, summarise
from graphfed.experiment import build_federation, run_experiment
from graphfed.messages import MessageError, check_metrics
from graphfed.metrics import classification_metrics, many_classification_metrics, roc_auc
from graphfed.training import plans
from tests.conftest import require

MUTAG = ["dataset=MUTAG", "partition=dirichlet", "model=gin", "num_clients=4"]


def _pairs_auc(scores: torch.Tensor, positive: torch.Tensor) -> float:
    """The definition itself: over every (positive, negative) pair, 1 when the positive scores
    higher, 1/2 on a tie."""
    pos, neg = scores[positive][:, None], scores[~positive][None]
    return float(((pos > neg).double() + 0.5 * (pos == neg).double()).mean())


@pytest.mark.parametrize(("scores", "labels", "expected"), [
    ([0.1, 0.2, 0.8, 0.9], [0, 0, 1, 1], 1.0),  # every positive above every negative
    ([0.9, 0.8, 0.2, 0.1], [0, 0, 1, 1], 0.0),  # reversed
    # pairs (pos 0.5: two ties with the negatives) + (pos 0.9: two wins) = 3 of 4
    ([0.5, 0.5, 0.5, 0.9], [0, 1, 0, 1], 0.75),
    ([3.0, 3.0, 3.0], [1, 0, 1], 0.5),  # all tied: every pair half
    ([0.2, 0.7, 0.4], [0, 1, 0], 1.0),
    ([0.3, 0.1, 0.6, 0.2, 0.5], [1, 0, 1, 1, 0], 4 / 6),  # 0.3 > 0.1, 0.2; 0.6 > both; 0.2 > 0.1
])
def test_roc_auc_by_hand(scores, labels, expected):
    assert roc_auc(np.array(scores), np.array(labels) == 1) == pytest.approx(expected)


def test_one_class_has_no_roc_auc_rather_than_a_made_up_value():
    assert roc_auc(np.array([0.2, 0.9]), np.array([True, True])) is None
    assert roc_auc(np.array([0.2, 0.9]), np.array([False, False])) is None
    assert roc_auc(np.array([]), np.array([], dtype=bool)) is None
    logits = torch.tensor([[0.0, 1.0], [2.0, 0.0], [0.5, 0.5]])
    assert "roc_auc" not in classification_metrics(logits, torch.tensor([1, 1, 1]), 2)
    assert classification_metrics(logits, torch.tensor([1, 0, 0]), 2)["roc_auc"] == 1.0


def test_only_binary_tasks_record_roc_auc():
    logits = torch.randn(12, 3)
    assert "roc_auc" not in classification_metrics(logits, torch.arange(12) % 3, 3)


def test_sets_scored_together_each_get_the_pairs_definition():
    """Many sets in one pass (the batched evaluation's path): each set's AUC is that of its own
    pairs, scored on the logit margin, ties (repeated logits) included."""
    generator = torch.Generator().manual_seed(0)
    sizes = [7, 1, 12, 5, 9]
    scored = []
    for n in sizes:
        logits = torch.randint(-2, 3, (n, 2), generator=generator).float()  # many ties
        target = torch.randint(0, 2, (n,), generator=generator)
        scored.append((logits, target, None))
    scored.append((torch.randn(4, 2, generator=generator), torch.zeros(4, dtype=torch.long),
                   None))  # one class only
    together = many_classification_metrics(scored, 2)
    for (logits, target, _), m in zip(scored, together, strict=True):
        positive = target == 1
        if positive.all() or not positive.any():
            assert "roc_auc" not in m
            continue
        expected = _pairs_auc(logits[:, 1] - logits[:, 0], positive)
        assert m["roc_auc"] == pytest.approx(expected)
        # the probability of class 1 ranks the rows as the margin does
        assert _pairs_auc(logits.softmax(1)[:, 1], positive) == pytest.approx(expected)
        assert m == classification_metrics(logits, target, 2)


def test_the_boundary_bounds_roc_auc_to_the_unit_interval():
    split = {"acc": 0.5, "loss": 0.7, "macro_f1": 0.5, "n": 4}
    check_metrics({"test": {**split, "roc_auc": 0.25}}, "client 0")
    check_metrics({"test": split}, "client 0")  # optional: absent on one class
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(MessageError, match="roc_auc"):
            check_metrics({"test": {**split, "roc_auc": bad}}, "client 0")


def _two_rounds(overrides: list[str], engine: str = "sequential"):
    fed = build_federation(load_config(None, [*overrides, "rounds=2", "device=cpu",
                                              "model.dropout=0", f"engine={engine}"]), 0)
    fed.setup()
    for rnd in (1, 2):
        fed.fit_round(rnd)
    return fed, fed.evaluate(2)


@pytest.mark.parametrize("overrides", [
    pytest.param(MUTAG, marks=require("MUTAG"), id="mutag"),
    pytest.param(["dataset=Minesweeper", "num_clients=3"], marks=require("Minesweeper"),
                 id="minesweeper")])
def test_a_binary_run_records_each_clients_roc_auc_and_their_mean(overrides):
    fed, result = _two_rounds(overrides)
    params = fed.runtime.server.global_params()  # FedAvg: every client scores the global model
    ranked = []
    for record, ctx in zip(result["clients"], fed.runtime.contexts, strict=True):
        outputs = ctx.data.outputs(
            fed.trainer.model, lambda m, a, k=None: functional_call(m, params, a, k),
            ("val", "test"))
        for split, (logits, target) in outputs.items():
            key = f"{split}_roc_auc"
            positive = target == 1
            if positive.all() or not positive.any():
                assert key not in record
                continue
            assert 0.0 <= record[key] <= 1.0
            assert record[key] == pytest.approx(
                _pairs_auc(logits[:, 1] - logits[:, 0], positive), abs=1e-9)
            if split == "test":
                ranked.append(record[key])
    assert ranked and result["test_roc_auc"] == pytest.approx(sum(ranked) / len(ranked))
    assert "test_roc_auc_pooled" not in result  # see evaluation's docstring
    assert {"test_roc_auc", "val_roc_auc"} <= set(self_reported(result["clients"]))
    assert summarise(result["clients"])["test_roc_auc"] == result["test_roc_auc"]


@require("MUTAG")
@pytest.mark.parametrize("case", ["fedavg", "local", "local-accelerator"])
def test_both_engines_give_the_same_roc_auc(case, monkeypatch):
    """Joined rows (FedAvg), each client's own pass (Local on the CPU) and, as on a GPU,
    clients padded and vmapped (Local with the accelerator's plan)."""
    if case.endswith("-accelerator"):
        monkeypatch.setattr(plans, "for_device", lambda device: plans.ACCELERATOR_PLAN)
    algorithm = case.removesuffix("-accelerator")
    runs = {engine: _two_rounds([*MUTAG, f"algorithm={algorithm}"], engine)[1]
            for engine in ("sequential", "batched")}
    sequential, batched = runs["sequential"], runs["batched"]
    keys = [k for k in sequential if "roc_auc" in k]
    assert keys and keys == [k for k in batched if "roc_auc" in k]
    for key in keys:
        assert sequential[key] == pytest.approx(batched[key], abs=1e-9), key
    for one, other in zip(sequential["clients"], batched["clients"], strict=True):
        auc = {k: v for k, v in one.items() if "roc_auc" in k}
        assert auc.keys() == {k for k in other if "roc_auc" in k}
        for key, value in auc.items():
            assert value == pytest.approx(other[key], abs=1e-9), (one["client"], key)


@require("MUTAG")
def test_a_binary_runs_summary_carries_the_test_roc_auc(tmp_path):
    run_dir, _ = run_experiment(load_config(None, [*MUTAG, "rounds=2", "device=cpu",
                                                   "checkpoint_every=0"]),
                                tmp_path, progress=False)
    last = json.loads((run_dir / "seed-0" / "metrics.jsonl").read_text().splitlines()[-1])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["final"]["test_roc_auc"] == last["test_roc_auc"]
    assert "test_roc_auc" in summary["self_reported"]  # the clients' word, said so


@require("Cora")
def test_a_multi_class_run_records_no_roc_auc():
    _, result = _two_rounds(["dataset=Cora", "num_clients=3"])
    assert not [k for k in result if "roc_auc" in k]
    assert not [k for c in result["clients"] for k in c if "roc_auc" in k]
