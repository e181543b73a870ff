"""GPFL's Fig. 1 (spec ``shared/specs/gpfl.md`` §4 "Figure 1", §7.3): self-training, FedAvg and
GPFL on NCI1 split into two groups of clients (``partition=gpfl_toy``), alike within a group,
under three degrees of heterogeneity between the groups and a growing number of clients (the
paper's data scarcity).

The paper names neither its toy rates nor its client counts; ours: rate 0.5 (homogeneous: both
groups have NCI1's label mix), 0.7 (moderately heterogeneous: 70 / 30 against 30 / 70) and 0.9
(highly: 90 / 10 against 10 / 90), each with 4, 10, 20 and 40 clients. Training and repeats are
Table 2's (fold 0 of the per-client stratified 5-fold split, three repeats).
"""

from __future__ import annotations

from pathlib import Path

from graphfed.reproduce.figures import Curve, panel_curves
from graphfed.reproduce.papers.gpfl import METHODS, QUICK, SHARED_REPEATS, TRAINING
from graphfed.reproduce.preset import Preset, register
from graphfed.reproduce.settings import parse_label

HETEROGENEITY = {"0.5": "homogeneous", "0.7": "moderately heterogeneous",
                 "0.9": "highly heterogeneous"}
CLIENTS = (4, 10, 20, 40)
SETTING_KEYS = {"rate": "partition.rate", "k": "num_clients"}
COMPARED = ("self-train", "fedavg", "gpfl")


def accuracy_panels(rows: list[dict]) -> dict[str, dict[str, Curve]]:
    """The client-mean test accuracy (mean, std over repeats) per heterogeneity panel, method
    and number of clients."""
    panels: dict[str, dict[str, Curve]] = {}
    for row in rows:
        if row["metric"] != "acc" or row["ours_mean"] is None:
            continue
        setting = dict(parse_label(row["dataset"], SETTING_KEYS).components)
        panel = f"{HETEROGENEITY.get(setting['rate'], '')} (rate {setting['rate']})"
        panels.setdefault(panel, {}).setdefault(row["method"], []).append(
            (int(setting["k"]), row["ours_mean"], row["ours_std"] or 0.0))
    return panels


def accuracy_figure(rows: list[dict], out: Path) -> Path:
    return panel_curves(accuracy_panels(rows), out / "heterogeneity.png", "clients",
                        "client-mean test accuracy",
                        "Two groups of clients, growing heterogeneity between them (cf. Fig. 1)")


MOTIVATION = register(Preset(
    name="gpfl-motivation",
    description="GPFL Fig. 1: self-train, FedAvg and GPFL on two groups of NCI1 clients, "
                "homogeneous to highly heterogeneous, 4 to 40 clients",
    variants=[v for v in METHODS if v.method in COMPARED],
    datasets=[f"NCI1/rate={r}/k={k}" for r in HETEROGENEITY for k in CLIENTS],
    metrics=("acc",), base=["partition=gpfl_toy", "partition.folds=5", *SHARED_REPEATS,
                            *TRAINING],
    seeds=3, quick=QUICK, setting_keys=SETTING_KEYS, folds=1, figures=[accuracy_figure],
    notes="rate: the share of class-0 graphs in group 0 (group 1 has the rest), so the groups' "
          "label mixes are rate / 1-rate against 1-rate / rate; k: the clients, half in each "
          "group. heterogeneity.png plots acc (final round, mean and std over the repeats) "
          "against k, one panel per rate. The paper gives this result as a figure only."))
