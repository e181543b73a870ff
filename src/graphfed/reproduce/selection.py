"""Which evaluated round a reported number comes from, by a named rule.

Papers differ in the round they report: the last one, the best one on the test set (a choice
made on the numbers being reported, so an optimistic one), or the one a validation loss picks.
A reproduction names its rule, and every table it writes says which. Evaluation may run only
every ``eval_every`` rounds; the rules see the evaluated rounds only.
"""

from __future__ import annotations

from collections.abc import Iterable

from graphfed.errors import GraphfedError
from graphfed.evaluation import OPTIONAL, RECORDED, REGRESSION
from graphfed.regression import TASKS

SELECTORS = {
    "final": "the last evaluated round",
    "max": "each metric at its best evaluated round (test-selected)",
    "best_last_10": "each metric at its best of the last 10 evaluated rounds (test-selected)",
    "min_val_loss": "every metric at the evaluated round of lowest pooled validation loss",
    "max_val_acc": "every metric at the evaluated round of highest validation accuracy averaged "
                   "over clients (FED-PUB's code)",
    "max_val_roc_auc": "every metric at the evaluated round of highest validation ROC-AUC "
                       "averaged over clients (binary tasks; Platonov et al.'s rule)",
    "max_val_auc": "every metric at the evaluated round of highest validation AUC of link "
                   "prediction (level edge) averaged over clients",
    "min_val_rmse": "every metric at the evaluated round of lowest pooled validation RMSE "
                    "(regression; the round min_val_loss picks, the loss being the MSE)",
}
TEST_SELECTED = ("max", "best_last_10")
LAST = 10
VAL_LOSS = "val_loss_pooled"
VAL_ACC = "val_acc"  # the unweighted mean over clients, as FED-PUB's ``Acc @ Best Val All``
# the validation key each validation rule picks its round by, and whether lower is better
BY_VALIDATION = {"min_val_loss": (VAL_LOSS, True), "max_val_acc": (VAL_ACC, False),
                 "max_val_roc_auc": ("val_roc_auc", False),
                 "max_val_auc": ("val_auc", False),
                 "min_val_rmse": ("val_rmse_pooled", True)}


def check_selector(rule: str) -> str:
    if rule not in SELECTORS:
        raise GraphfedError(f"unknown selector '{rule}'; choose one of: {', '.join(SELECTORS)}")
    return rule


def recorded_by(key: str) -> tuple[str, ...]:
    """The tasks whose runs record the ``metrics.jsonl`` key ``key``: a split's accuracy, F1 or
    ROC-AUC only classification runs, its MAE or RMSE only regression runs; a loss, or a key
    that is no split's statistic, every task."""
    stem = key.removesuffix("_pooled")
    tasks = [task for task, stats in (("classification", (*RECORDED, *OPTIONAL)),
                                      ("regression", REGRESSION))
             if any(stem.endswith(f"_{stat}") for stat in stats)]
    return tuple(tasks) or TASKS


def check_task(rule: str, keys: Iterable[str], task: str, dataset: str) -> None:
    """Refuse, in one line and before anything trains, a rule or a metric whose key no run of
    ``task`` records (an accuracy asked of a regression run, an RMSE of a classifier)."""
    asked = [(f"select {rule}", BY_VALIDATION[rule][0])] if rule in BY_VALIDATION else []
    for what, key in [*asked, *((f"metric {key}", key) for key in keys)]:
        if task not in recorded_by(key):
            raise GraphfedError(f"{what} reads {key}, which a {task} run ({dataset}) does not "
                                f"record: it is for {'/'.join(recorded_by(key))} tasks")


def tag(rule: str) -> str:
    """The rule's name, marked when it selects on the test set."""
    return f"{rule} (test-selected)" if rule in TEST_SELECTED else rule


def evaluated(lines: list[dict]) -> list[dict]:
    """The evaluated rounds of a ``metrics.jsonl``: the lines with per-client records."""
    return [line for line in lines if "clients" in line]


def selected_round(rule: str, rounds: list[dict], key: str) -> dict:
    """The evaluated round (a line of ``metrics.jsonl``) the rule reports ``key`` from; on a tie
    the earliest. ``min_val_loss`` picks one round whatever the key, so all of a seed's numbers
    come from the same model; so do the other validation rules."""
    if rule == "final":
        return rounds[-1]
    if rule in BY_VALIDATION:
        by, lower = BY_VALIDATION[rule]
        scored = [r for r in rounds if by in r]
        if not scored:
            raise GraphfedError(f"select {rule}: the run records no {by} (no validation "
                                "samples, a task it does not apply to, or a run from before "
                                "it was recorded)")
        return (min(scored, key=lambda r: r[by]) if lower
                else max(scored, key=lambda r: r[by]))
    window = rounds[-LAST:] if rule == "best_last_10" else rounds
    scored = [r for r in window if key in r]
    return max(scored, key=lambda r: r[key]) if scored else window[-1]
