"""GPFL's Figs. 1 and 3 (spec ``shared/specs/gpfl.md`` §4 "Figure 1", §7.3): self-training,
FedAvg and GPFL on NCI1 split into two groups of clients (``partition=gpfl_toy``), alike within a
group, under three degrees of heterogeneity between the groups and a growing number of clients
(the paper's data scarcity); and, from the same GPFL runs, how alike the clients look through
their raw and through their marginal parameters (Fig. 3), each similarity averaged over the
rounds.

The paper names neither its toy rates nor its client counts; ours: rate 0.5 (homogeneous: both
groups have NCI1's label mix), 0.7 (moderately heterogeneous: 70 / 30 against 30 / 70) and 0.9
(highly: 90 / 10 against 10 / 90), each with 4, 10, 20 and 40 clients. Training and repeats are
Table 2's (fold 0 of the per-client stratified 5-fold split, three repeats).
"""

from __future__ import annotations

from pathlib import Path

import torch

from graphfed.reproduce.figures import Curve, panel_curves, similarity_heatmaps
from graphfed.reproduce.network_stats import grouping
from graphfed.reproduce.papers.gpfl import QUICK, SHARED_REPEATS, TRAINING
from graphfed.reproduce.papers.gpfl_network import (
    mean_record,
    run_dir,
    run_records,
    write_report,
)
from graphfed.reproduce.preset import Preset, Variant, register
from graphfed.reproduce.settings import parse_label

HETEROGENEITY = {"0.5": "homogeneous", "0.7": "moderately heterogeneous",
                 "0.9": "highly heterogeneous"}
CLIENTS = (4, 10, 20, 40)
SETTING_KEYS = {"rate": "partition.rate", "k": "num_clients"}
FEATURES = ("raw", "marginal")


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


def similarity_figures(rows: list[dict], out: Path) -> Path:
    """``similarity-<setting>.png`` per GPFL run (raw beside marginal, clients of group 0
    first) and every setting's within / between group means in ``similarity.json``."""
    report = {}
    for label in dict.fromkeys(r["dataset"] for r in rows if r["method"] == "gpfl"):
        shares, lines = run_records(run_dir(out, "gpfl", label, SETTING_KEYS))
        means = {kind: mean_record(lines, f"{kind}_similarity", len(shares))[0]
                 for kind in FEATURES}
        groups = torch.arange(len(shares)) >= len(shares) // 2  # gpfl_toy: group 0 first
        found = report[label] = {kind: grouping(m, shares, groups) for kind, m in means.items()}
        similarity_heatmaps(
            {f"{kind} parameters": m.tolist() for kind, m in means.items()},
            out / f"similarity-{parse_label(label, SETTING_KEYS).folder}.png",
            f"{label}: mean similarity within / between the groups: " + "; ".join(
                f"{kind} {found[kind]['within']:.2f} / {found[kind]['between']:.2f}"
                for kind in FEATURES) + " (cf. Fig. 3)")
    return write_report(out / "similarity.json", report)


MOTIVATION = register(Preset(
    name="gpfl-motivation",
    description="GPFL Figs. 1 and 3: self-train, FedAvg and GPFL on two groups of NCI1 "
                "clients, homogeneous to highly heterogeneous, 4 to 40 clients; GPFL's raw and "
                "marginal parameter similarities",
    variants=[Variant("self-train", "local"), Variant("fedavg", "fedavg"),
              Variant("gpfl", "gpfl", ("gpfl.record_similarity=true",))],
    datasets=[f"NCI1/rate={r}/k={k}" for r in HETEROGENEITY for k in CLIENTS],
    metrics=("acc",), base=["partition=gpfl_toy", "partition.folds=5", *SHARED_REPEATS,
                            *TRAINING],
    seeds=3, quick=QUICK, setting_keys=SETTING_KEYS, folds=1,
    figures=[accuracy_figure, similarity_figures],
    notes="rate: the share of class-0 graphs in group 0 (group 1 has the rest), so the groups' "
          "label mixes are rate / 1-rate against 1-rate / rate; k: the clients, half in each "
          "group. heterogeneity.png plots acc (final round, mean and std over the repeats) "
          "against k, one panel per rate. similarity-<setting>.png: GPFL's clients' cosine "
          "similarities through raw and through marginal parameters (Fig. 3), averaged over "
          "the rounds of the first repeat; similarity.json: their mean within and between the "
          "two groups. The paper gives these results as figures only."))
