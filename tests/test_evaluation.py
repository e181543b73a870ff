"""Evaluation records: counts, pooled and minority-class accuracy, by hand and on a real run."""

import json

import pytest
import torch
from torch.func import functional_call

from graphfed.config import load_config
from graphfed.evaluation import client_record, summarise
from graphfed.experiment import FINAL_KEYS, build_federation, run_experiment
from graphfed.metrics import classification_metrics, majority_class
from tests.conftest import require


def _split(n: int, acc: float, loss: float, minority_n: int, minority_acc: float | None = None):
    out = {"acc": acc, "loss": loss, "macro_f1": acc, "micro_f1": acc, "n": n,
           "minority_n": minority_n}
    if minority_acc is not None:
        out["minority_acc"] = minority_acc
    return out


def test_records_and_summaries_follow_their_definitions_by_hand():
    records = [
        client_record(0, {"val": _split(2, 1.0, 0.2, 1, 1.0), "test": _split(4, 0.5, 1.0, 2, 0.0),
                          "global": {"acc": 0.6, "loss": 0.9, "macro_f1": 0.5, "micro_f1": 0.6,
                                     "n": 10}}),
        client_record(1, {"val": _split(6, 0.5, 0.6, 3, 0.0), "test": _split(2, 1.0, 0.1, 0)}),
        client_record(2, {"val": _split(2, 0.5, 0.4, 0), "test": _split(4, 0.75, 0.5, 1, 1.0),
                          "train": _split(20, 0.9, 0.3, 5, 0.8)}),
    ]
    assert records[0] == {
        "client": 0, "val_acc": 1.0, "val_loss": 0.2, "val_macro_f1": 1.0, "val_count": 2,
        "val_minority_count": 1, "val_minority_acc": 1.0, "test_acc": 0.5, "test_loss": 1.0,
        "test_macro_f1": 0.5, "test_count": 4, "test_minority_count": 2, "test_minority_acc": 0.0,
        "global_acc": 0.6, "global_loss": 0.9, "global_macro_f1": 0.5, "global_count": 10}
    # no minority test samples: a count of 0 and no accuracy, rather than a made-up 0 or 1
    assert records[1]["test_minority_count"] == 0 and "test_minority_acc" not in records[1]
    assert records[2]["train_loss_deployed"] == 0.3 and "train_loss_deployed" not in records[0]

    out = summarise(records)
    assert out["test_acc"] == pytest.approx((0.5 + 1.0 + 0.75) / 3)  # each client once
    assert out["test_acc_pooled"] == pytest.approx((2 + 2 + 3) / 10)  # correct / samples
    assert out["test_loss_pooled"] == pytest.approx((4 * 1.0 + 2 * 0.1 + 4 * 0.5) / 10)
    assert out["test_minority_acc"] == pytest.approx((0.0 + 1.0) / 2)  # client 1 left out
    assert out["test_minority_acc_pooled"] == pytest.approx((0 + 1) / 3)
    assert out["val_loss"] == pytest.approx((0.2 + 0.6 + 0.4) / 3)
    assert out["val_loss_pooled"] == pytest.approx((2 * 0.2 + 6 * 0.6 + 2 * 0.4) / 10)
    assert out["val_acc_pooled"] == pytest.approx((2 + 3 + 1) / 10)
    assert out["val_minority_acc"] == pytest.approx(0.5)  # client 2: no minority val samples
    assert out["val_minority_acc_pooled"] == pytest.approx(1 / 4)
    assert out["client_global_test_acc"] == 0.6


def test_minority_accuracy_leaves_the_majority_class_out():
    target = torch.tensor([0, 0, 1, 2, 2, 0])
    pred = torch.tensor([0, 0, 1, 0, 2, 1])
    logits = torch.nn.functional.one_hot(pred, 3).float()
    m = classification_metrics(logits, target, 3, majority=0)
    assert m["acc"] == pytest.approx(4 / 6)
    assert m["minority_n"] == 3 and m["minority_acc"] == pytest.approx(2 / 3)  # labels 1, 2, 2
    assert "minority_n" not in classification_metrics(logits, target, 3)
    only_majority = classification_metrics(logits[:2], target[:2], 3, majority=0)
    assert only_majority["minority_n"] == 0 and "minority_acc" not in only_majority


def test_the_training_majority_breaks_ties_by_the_smallest_label():
    assert majority_class(torch.tensor([2, 1, 2, 1, 0])) == 1
    assert majority_class(torch.tensor([3, 3, 0])) == 3
    assert majority_class(torch.tensor([], dtype=torch.long)) is None


@require("Cora")
def test_a_real_rounds_records_match_the_clients_own_predictions():
    config = load_config(None, ["dataset=Cora", "num_clients=3", "partition=metis", "rounds=1",
                                "device=cpu", "partition.split=[0.3,0.3,0.4]"])
    fed = build_federation(config, 0)
    fed.fit_round(1)
    result = fed.evaluate(1)
    params = fed.runtime.server.global_params()  # FedAvg: every client deploys the global model
    correct = total = 0
    for record, client, ctx in zip(result["clients"], fed.data.clients, fed.runtime.contexts,
                                   strict=True):
        logits, target = ctx.data.outputs(
            fed.trainer.model, lambda m, a, k=None: functional_call(m, params, a, k),
            ("test",))["test"]
        hits = logits.argmax(1) == target
        majority = int(torch.bincount(client.labels("train")).argmax())
        minority = target != majority
        assert record["test_count"] == len(target) == client.num_samples("test")
        assert record["test_minority_count"] == int(minority.sum())
        assert record["test_minority_acc"] == pytest.approx(float(hits[minority].float().mean()))
        correct, total = correct + int(hits.sum()), total + len(target)
    assert result["test_acc_pooled"] == pytest.approx(correct / total)


@require("PROTEINS")
def test_metrics_jsonl_and_the_summary_carry_the_new_keys(tmp_path):
    base = ["dataset=PROTEINS", "model=gin", "partition=dirichlet", "num_clients=3", "rounds=2",
            "partition.split=[0.6,0.2,0.2]", "device=cpu", "checkpoint_every=0"]
    run_dir, _ = run_experiment(load_config(None, [*base, "eval_train_split=true", "name=a"]),
                                tmp_path, progress=False)
    line = json.loads((run_dir / "seed-0" / "metrics.jsonl").read_text().splitlines()[-1])
    for key in ("val_count", "test_count", "val_loss", "test_minority_count",
                "train_loss_deployed"):
        assert all(key in c for c in line["clients"]), key
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in ("test_acc_pooled", "val_acc_pooled", "val_loss", "val_loss_pooled",
                "test_minority_acc", "test_minority_acc_pooled"):
        assert key in FINAL_KEYS and key in summary["final"], key
    off, _ = run_experiment(load_config(None, [*base, "name=b"]), tmp_path, progress=False)
    off_line = json.loads((off / "seed-0" / "metrics.jsonl").read_text().splitlines()[-1])
    assert not any("train_loss_deployed" in c for c in off_line["clients"])


@require("Cora")
def test_the_training_split_pass_changes_no_other_number(tmp_path):
    """Sampled evaluation draws neighbourhoods: the extra train pass must not shift the draws
    of the splits evaluated after it (here the global test set) or anything else."""
    base = ["dataset=Cora", "model=mlp_sage", "sampling.fanouts=[4,4]",
            "sampling.evaluate=sampled", "num_clients=3", "rounds=2", "batch_size=64",
            "partition.global_test=0.2", "client_global_eval=true", "device=cpu",
            "checkpoint_every=0"]

    def lines(*extra):
        run_dir, _ = run_experiment(load_config(None, [*base, *extra]), tmp_path,
                                    progress=False)
        out = [json.loads(x) for x in (run_dir / "seed-0" / "metrics.jsonl").read_text()
               .splitlines()]
        for line in out:
            del line["train_seconds"], line["eval_seconds"]
            for key in [k for k in line if k.startswith("train_loss_deployed")]:
                del line[key]  # the pass's own numbers, summarised over the clients
            for c in line["clients"]:
                c.pop("train_loss_deployed", None)
        return out

    assert lines("name=with", "eval_train_split=true") == lines("name=without")


@require("Cora")
@pytest.mark.parametrize("extra", [[], ["model.sparse_features=true"]], ids=["dense", "csr"])
def test_a_client_scored_on_its_whole_graph_takes_one_pass_for_all_its_splits(extra):
    fed = build_federation(load_config(None, ["dataset=Cora", "num_clients=3", "device=cpu",
                                              "eval_train_split=true", *extra]), 0)
    trainer, data = fed.trainer, fed.runtime.contexts[0].data
    params = trainer.initial_params()
    passes = []
    hook = trainer.model.register_forward_hook(lambda *_: passes.append(1))
    metrics = trainer.evaluate(params, data)
    hook.remove()
    assert len(passes) == 1 and list(metrics) == ["val", "test", "train"]
    for split, m in metrics.items():
        assert m == trainer.evaluate(params, data, (split,))[split]
