"""GPFL (under review): Table 2's fold protocol, its motivation figures, ablation and learned
client network."""

from __future__ import annotations

from graphfed.reproduce.paper_items.model import (
    NOT_REPRODUCED,
    NOT_RUN,
    NOT_STAGEABLE,
    PARTLY,
    REPRODUCED,
    Item,
    Paper,
    Ref,
    diagram,
    statistics,
)

_FOLD0 = {"NCI1": "gpfl-table2-nci1-k25-fold0", "PROTEINS": "gpfl-table2-proteins-k25-fold0"}
_FIVE = {"0.5": "gpfl-table2-proteins-k25-a05-5fold", "1": "gpfl-table2-proteins-k25-a1-5fold",
         "5": "gpfl-table2-proteins-k25-a5-5fold"}
_MOTIVATION = "gpfl-motivation-nci1"
_ABLATION = "gpfl-ablation-proteins-k25-a05-fold0"
_ALPHAS = ("0.5", "1", "5")


def _cell(dataset: str, alpha: str) -> str:
    return f"{dataset}/k=25/alpha={alpha}"


def _fig1(method: str, rate: str, label: str) -> Ref:
    return Ref(_MOTIVATION, method, f"NCI1/rate={rate}/k=40", "acc", label)


PAPER = Paper(
    key="gpfl", title="GPFL (under review)", place=3, tables=2, figures=7,
    items=(
        statistics("Table 1"),
        Item("Table 2 (PROTEINS, k = 25, 15 runs)", "accuracy of GPFL, self-train and FedAvg",
             REPRODUCED,
             "the paper's protocol, 5 folds × 3 repeats, at every α: each of the three methods "
             "within the tolerance of the paper's number on the last round",
             refs=tuple(Ref(_FIVE[a], m, _cell("PROTEINS", a), "acc", f"{name} α = {a}")
                        for a in _ALPHAS
                        for m, name in (("gpfl", "GPFL"), ("self-train", "self-train"),
                                        ("fedavg", "FedAvg")))),
        Item("Table 2 (NCI1 and PROTEINS, k = 25, fold 0)", "accuracy of all nine methods",
             PARTLY,
             "fold 0 × 3 repeats: GPFL within the tolerance of the paper on the best of the "
             "last 10 rounds (test-selected) in all six cells, first of the nine at NCI1 "
             "α = 1, 5 and PROTEINS α = 0.5; on the last round PROTEINS α = 1 and α = 5 fall "
             "short on this fold, which the 15-run cells above do not (the baselines: on the "
             "page)",
             refs=tuple(Ref(_FOLD0[d], "gpfl", _cell(d, a), metric,
                            f"GPFL {d} α = {a}" if metric == "acc_best_last_10" else "last",
                            paper_of="")
                        for d in ("NCI1", "PROTEINS") for a in _ALPHAS
                        for metric in ("acc_best_last_10", "acc")),
             folders=("gpfl-table2-nci1-k25-a05-fold0",
                      "gpfl-table2-nci1-k25-a05-distinct_graphs",
                      "gpfl-table2-proteins-k25-a5-distinct_graphs",
                      "gpfl-table2-proteins-k25-a5-property_standardize")),
        Item("Table 2 (k = 20, 15; the other cells' folds)", "the rest of the protocol",
             NOT_RUN, "GPU-scale cost: the whole protocol is about 95 CPU-hours here"),
        Item("Table 2 (Yeast)", "the Yeast columns", NOT_RUN, NOT_STAGEABLE.format("Yeast")),
        Item("Fig. 1", "self-train, FedAvg and GPFL on two groups of clients over k",
             PARTLY,
             "NCI1, one repeat (the paper gives neither its rates nor its client counts): "
             "FedAvg's lead over self-train grows with k when the groups are alike and FedAvg "
             "falls far below self-train when they are apart, as in the paper; at the middle "
             "rate FedAvg never passes self-train; GPFL first or level with the first except "
             "where one shared model is right (k = 40 shown)",
             refs=(_fig1("fedavg", "0.5", "alike: FedAvg"), _fig1("self-train", "0.5",
                                                                  "self-train"),
                   _fig1("fedavg", "0.9", "apart: FedAvg"), _fig1("self-train", "0.9",
                                                                  "self-train"),
                   _fig1("gpfl", "0.9", "GPFL"))),
        diagram("Fig. 2", "the overview of GPFL"),
        Item("Fig. 3", "raw against marginal parameter similarity", PARTLY,
             "from the Fig. 1 runs: marginal parameters separate the two groups, as in the "
             "paper; raw ones are less alike across the groups than the paper's figure shows "
             "(similarity.json; no table.csv, so no number here)",
             folders=(_MOTIVATION,)),
        Item("Figs. 4, 7", "the ablation: random or property network, fixed or learnt",
             NOT_REPRODUCED,
             "one cell (PROTEINS, k = 25, α = 0.5, fold 0, one run each): only the random fixed "
             "network is clearly behind, and the paper's order (property + learn first) is not "
             "shown; the full ablation (18 settings × 15 runs) not run: GPU-scale cost",
             refs=(Ref(_ABLATION, "gpfl", _cell("PROTEINS", "0.5"), "acc", "GPFL"),
                   Ref(_ABLATION, "gpfl[property]", _cell("PROTEINS", "0.5"), "acc",
                       "property, fixed"),
                   Ref(_ABLATION, "gpfl[random]", _cell("PROTEINS", "0.5"), "acc",
                       "random, fixed"))),
        Item("Fig. 5", "the learned client network", REPRODUCED,
             "NCI1 (the paper's setting) and PROTEINS, k = 25, α = 0.5: the network links "
             "like-labelled clients, its weights correlating clearly with the clients' label "
             "similarity (network.json; no table.csv, so no number here)",
             folders=("gpfl-network-nci1", "gpfl-network-proteins")),
        Item("Fig. 6", "the run time of property initialisation and network learning",
             NOT_RUN,
             "not attempted as a timing study: the seconds per round in the tables come from "
             "runs sharing two cores"),
    ),
    summary_note="Table 2, PROTEINS, k = 25, the paper's 15 runs (fold 0 of all six k = 25 "
                 "cells: the page)",
    summary=tuple(Ref(_FIVE[a], "gpfl", _cell("PROTEINS", a), "acc", f"α = {a}")
                  for a in _ALPHAS),
)
