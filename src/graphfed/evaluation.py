"""Evaluation records: what each client's evaluation becomes in ``metrics.jsonl``, and the
run-level numbers summarised from those records.

Pure functions over plain dicts, outside the orchestrator, so every definition is in one place
and can be checked by hand. Per client, for each split ``s`` it evaluated (``val``, ``test``, and
``global``: the client's model on the shared global test set):

* ``s_acc``, ``s_loss``, ``s_macro_f1``, ``s_count``: accuracy, mean cross-entropy, macro-F1 and
  the number of samples;
* ``s_roc_auc`` (binary tasks only): the ROC-AUC of the positive-class score, ties counting half
  (``metrics.roc_auc``); absent when the split holds one class only;
* ``s_minority_acc``, ``s_minority_count`` (the client's own splits): the same on the samples
  whose label is not the client's training-majority class (the most frequent training label, the
  smallest on a tie); the accuracy is absent when the count is 0;
* ``train_loss_deployed`` (config ``eval_train_split``): the mean loss of the model the client
  deploys on its own training split.

Of a regression client (``graphfed.regression``: one real target per graph), per split ``s``
instead: ``s_mae``, ``s_rmse`` (in the target's units, the predictions de-standardised),
``s_loss`` (the mean squared error, RMSE²) and ``s_count``.

Of a link-prediction client (``graphfed.linkpred``: ``level: edge``), per split ``s``: ``s_auc``,
``s_ap``, ``s_hits@20``, ``s_hits@50``, ``s_hits@100``, ``s_mrr``, ``s_loss`` (the binary
cross-entropy over the split's positive and negative pairs) and ``s_count`` (its positive
pairs, the supervision edges).

Run level, for ``s`` in ``val``, ``test``:

* ``s_acc``, ``s_loss`` (and ``test_acc``'s spread): means over the clients, each client counting
  once whatever its size;
* ``s_acc_pooled``, ``s_loss_pooled``: sample-weighted over the clients, i.e. all clients'
  correct samples (summed losses) over all their samples;
* ``s_minority_acc``: the mean over the clients that have minority samples; a client without any
  is left out, not counted as 0 or 1; ``s_minority_acc_pooled``: all clients' correct minority
  samples over all their minority samples;
* ``s_roc_auc`` (binary tasks): the mean over the clients that have one. There is no pooled
  ROC-AUC: it ranks every positive against every negative of *all* clients, and a record holds
  its client's AUC, not its scores, so the pairs across clients are not there to count (no mean
  of AUCs, weighted or not, equals it);
* regression: ``s_mae``, ``s_rmse``, ``s_loss`` (and ``test_rmse``'s spread): means over the
  clients; ``s_mae_pooled``, ``s_rmse_pooled``, ``s_loss_pooled``: over all clients' samples
  (the absolute errors, squared errors summed over every sample, over all samples; the pooled
  RMSE is sqrt(Σ n_i RMSE_i² / Σ n_i)), so ``min_val_loss`` selects the round of lowest pooled
  validation RMSE;
* link prediction: each of ``LINK`` (and ``test_auc``'s spread): means over the clients;
  ``s_<metric>_pooled``: the clients' values weighted by their positive pairs, Σ n_i m_i / Σ n_i.
  That is a weighted mean, not the metric of every client's pairs ranked together (which needs
  the scores, as the pooled ROC-AUC above); for the loss it is the mean over all pairs, so
  ``min_val_loss`` selects the round of lowest validation cross-entropy over all clients'
  pairs, and ``max_val_auc`` the round of highest mean validation AUC;
* ``train_loss_deployed`` and its ``_std``, ``_var``, ``_entropy`` (whenever records carry it):
  the fairness of the deployed models across the clients, as q-FFL (Li et al. 2020) and FairGFL
  (Zhou et al. 2025, Sec. VII-A) measure it on the clients' *training* losses F_i, over every
  client evaluated: the mean F̄, the population variance (1/N) Σ (F_i − F̄)² (lower is fairer)
  and the entropy −Σ p_i log p_i of p_i = F_i / Σ_j F_j (higher is fairer, at most log N).

Every one of these run-level numbers is self-reported (``self_reported`` names them for a
summary): each is computed from the clients' own evaluations, which the server cannot repeat (it
holds none of their data). The boundary bounds them (``messages.METRICS``: accuracies and the
ROC-AUC in [0, 1], finite non-negative losses, and the validation and test counts the partition
gives, see ``runtime.base``); within those bounds a client's claim stands. What the server
measures itself (``global_test_*``, on the global model) is not among them.
"""

from __future__ import annotations

from graphfed.linkpred import RANKING
from graphfed.metrics import client_summary, mean_std
from graphfed.regression import pooled_rmse

OWN_SPLITS = ("val", "test")
RECORDED = ("acc", "loss", "macro_f1")
REGRESSION = ("mae", "rmse", "loss")  # recorded instead of ``RECORDED`` for a real target
OPTIONAL = ("roc_auc",)  # recorded where the split's metrics have it (binary tasks)
LINK = (*RANKING, "loss")  # recorded instead of ``RECORDED`` for scored node pairs
# the run-level regression numbers a seed's summary keeps (``summarise``)
REGRESSION_FINAL = (*(f"{split}_{key}{suffix}" for split in OWN_SPLITS
                       for key in ("mae", "rmse") for suffix in ("", "_pooled")),
                    "test_rmse_std")
# the run-level link-prediction numbers a seed's summary keeps
LINK_FINAL = (*(f"{split}_{key}{suffix}" for split in OWN_SPLITS
                for key in RANKING for suffix in ("", "_pooled")), "test_auc_std")


def client_record(client: int, metrics: dict[str, dict]) -> dict:
    """One client's entry in ``metrics.jsonl`` from its metrics per split
    (``Trainer.evaluate``'s output, with ``global`` for the shared global test set)."""
    record: dict = {"client": client}
    for split in (*OWN_SPLITS, "global"):
        if split not in metrics:
            continue
        m = metrics[split]
        record.update({f"{split}_{key}": m[key] for key in _recorded(m)})
        record.update({f"{split}_{key}": m[key] for key in OPTIONAL if key in m})
        record[f"{split}_count"] = m["n"]
        if "minority_n" in m:
            record[f"{split}_minority_count"] = m["minority_n"]
            if "minority_acc" in m:
                record[f"{split}_minority_acc"] = m["minority_acc"]
    if "train" in metrics:
        record["train_loss_deployed"] = metrics["train"]["loss"]
    return record


def _recorded(metrics: dict) -> tuple[str, ...]:
    """The keys a split's metrics are recorded under, by its task."""
    if "rmse" in metrics:
        return REGRESSION
    return LINK if "auc" in metrics else RECORDED


def client_mean(records: list[dict], key: str) -> float:
    return mean_std([r[key] for r in records])[0]


def pooled(records: list[dict], key: str, count_key: str) -> float:
    """``key`` weighted by ``count_key`` over ``records`` (each must have both, a positive
    count in total): for an accuracy, correct samples over samples."""
    total = sum(r[count_key] for r in records)
    return sum(r[key] * r[count_key] for r in records) / total


def summarise(records: list[dict]) -> dict:
    """The run-level numbers of one evaluated round from its per-client records."""
    out: dict = {}
    test = [r for r in records if "test_acc" in r]
    if test:
        out.update(client_summary(test, "test_acc"))
        out.update(client_summary(test, "test_loss"))
        out["test_macro_f1"] = client_mean(test, "test_macro_f1")
    on_global = [r for r in records if "global_acc" in r]
    if on_global:
        out["client_global_test_acc"] = client_mean(on_global, "global_acc")
    deployed = [r for r in records if "train_loss_deployed" in r]
    if deployed:
        out.update(client_summary(deployed, "train_loss_deployed"))
    val = [r for r in records if "val_acc" in r]
    if val:
        out["val_acc"] = client_mean(val, "val_acc")
        out["val_loss"] = client_mean(val, "val_loss")
    for split in OWN_SPLITS:
        out.update(pooled_summary(records, split))
        out.update(regression_summary(records, split))
        out.update(link_summary(records, split))
    return out


def task_means(records: list[dict], split: str, marker: str, keys: tuple[str, ...]
               ) -> tuple[list[dict], dict]:
    """The records of ``split`` that carry ``<split>_<marker>`` (a task's clients) and the
    client means of its ``keys``, with ``test_<marker>``'s spread over clients; none of either
    where no record carries it."""
    scored = [r for r in records if f"{split}_{marker}" in r]
    out: dict = {}
    if scored and split == "test":
        out.update(client_summary(scored, f"test_{marker}"))
    for key in keys if scored else ():
        name = f"{split}_{key}"
        out.setdefault(name, client_mean(scored, name))
    return scored, out


def link_summary(records: list[dict], split: str) -> dict:
    """The client means and the positive-weighted pooled values of ``split``'s ``LINK``
    metrics over the records of link-prediction clients; empty where there are none."""
    scored, out = task_means(records, split, "auc", LINK)
    if not scored:
        return {}
    for key in LINK:
        name = f"{split}_{key}"
        out[f"{name}_pooled"] = pooled(scored, name, f"{split}_count")
    return out


def regression_summary(records: list[dict], split: str) -> dict:
    """The client means and pooled values of ``split``'s MAE, RMSE and mean squared error
    (``loss``) over the records of regression clients; empty where there are none."""
    scored, out = task_means(records, split, "rmse", REGRESSION)
    if not scored:
        return {}
    counts = [r[f"{split}_count"] for r in scored]
    out[f"{split}_mae_pooled"] = pooled(scored, f"{split}_mae", f"{split}_count")
    out[f"{split}_rmse_pooled"] = pooled_rmse([r[f"{split}_rmse"] for r in scored], counts)
    out[f"{split}_loss_pooled"] = pooled(scored, f"{split}_loss", f"{split}_count")
    return out


def self_reported(records: list[dict]) -> list[str]:
    """The names of the run-level numbers ``summarise`` gives for ``records``: all of them rest
    on the clients' own claims, which a summary should say."""
    return sorted(summarise(records))


def pooled_summary(records: list[dict], split: str) -> dict:
    """Pooled accuracy and loss of ``split``, its minority accuracy (client mean, pooled) and
    its ROC-AUC (client mean; no pooled value, see the module's docstring)."""
    out: dict = {}
    having = [r for r in records if f"{split}_acc" in r]
    if having:
        for key in ("acc", "loss"):
            out[f"{split}_{key}_pooled"] = pooled(having, f"{split}_{key}", f"{split}_count")
    minority = [r for r in records if f"{split}_minority_acc" in r]
    if minority:
        key = f"{split}_minority_acc"
        out[key] = client_mean(minority, key)
        out[f"{key}_pooled"] = pooled(minority, key, f"{split}_minority_count")
    ranked = [r for r in records if f"{split}_roc_auc" in r]
    if ranked:
        out[f"{split}_roc_auc"] = client_mean(ranked, f"{split}_roc_auc")
    return out
