"""GPFL's Fig. 5: the learned client network beside the clients' label distributions (spec
``shared/specs/gpfl.md`` §4), with a measured statistic for the paper's reading that the network
links clients of similar label distributions (``reproduce.network_stats``).

One run of GPFL per setting, Table 2's protocol (fold 0, one repeat). The network is N̂ averaged
over every round in which all clients answered (the paper averages over rounds); a client's label
distribution is that of its training graphs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from torch import Tensor

from graphfed.build import federated_data
from graphfed.config import load_config
from graphfed.reproduce.figures import network_heatmap
from graphfed.reproduce.network_stats import grouping, label_distributions, label_order
from graphfed.reproduce.papers.gpfl import QUICK, SETTING_KEYS, SHARED_REPEATS, SPLIT, TRAINING
from graphfed.reproduce.preset import Preset, Variant, register
from graphfed.reproduce.settings import parse_label
from graphfed.serialization import read_metrics

SEED = 0
DECIMALS = 4


def mean_record(lines: list[dict], key: str, clients: int) -> tuple[Tensor, int]:
    """The server's client x client record ``key`` averaged over the rounds where it covers all
    ``clients``, and how many rounds did."""
    records = [torch.tensor(line["server"][key], dtype=torch.float64) for line in lines
               if len(line.get("server", {}).get(key, ())) == clients]
    if not records:
        raise ValueError(f"no round recorded a {key} over all {clients} clients")
    return torch.stack(records).mean(dim=0), len(records)


def run_records(run: Path) -> tuple[Tensor, list[dict]]:
    """A run's clients' training label distributions and seed ``SEED``'s rounds."""
    data = federated_data(load_config(run / "config.yaml"), SEED)
    shares = label_distributions([c.labels("train") for c in data.clients], data.num_classes)
    return shares, read_metrics(run / f"seed-{SEED}" / "metrics.jsonl")


def setting_network(run: Path) -> dict:
    """One run's mean network in label order, its clients' label distributions and the
    statistic (``network_stats.grouping``)."""
    shares, lines = run_records(run)
    network, rounds = mean_record(lines, "network", len(shares))
    order = label_order(shares)
    return {"rounds": rounds, **grouping(network, shares), "order": order,
            "network": network[order][:, order].round(decimals=DECIMALS).tolist(),
            "label_distribution": shares[order].round(decimals=DECIMALS).tolist()}


def write_report(path: Path, report: dict) -> Path:
    """``report`` as JSON, an undefined statistic (NaN) as null."""
    def defined(value: object) -> object:
        if isinstance(value, dict):
            return {k: defined(v) for k, v in value.items()}
        return None if isinstance(value, float) and math.isnan(value) else value

    path.write_text(json.dumps(defined(report), indent=1))
    return path


def run_dir(out: Path, method: str, label: str, setting_keys: dict[str, str]) -> Path:
    """The directory of a preset's cell on fold 0 (the runner's naming)."""
    return out / "runs" / f"{method}-{parse_label(label, setting_keys).folder}-fold0"


def network_figures(rows: list[dict], out: Path) -> Path:
    """``network-<setting>.png`` per GPFL run and every setting's numbers in ``network.json``."""
    report = {}
    for method, label in dict.fromkeys((r["method"], r["dataset"]) for r in rows):
        folder = parse_label(label, SETTING_KEYS).folder
        found = report[label] = setting_network(run_dir(out, method, label, SETTING_KEYS))
        network_heatmap(found["network"], found["label_distribution"],
                        [str(i) for i in found["order"]], out / f"network-{folder}.png",
                        f"{method} on {label}: mean network over {found['rounds']} rounds, "
                        f"clients by majority label\nwithin/between weight ratio "
                        f"{found['ratio']:.2f}, corr(weight, label similarity) "
                        f"{found['correlation']:.2f}")
    return write_report(out / "network.json", report)


NETWORK = register(Preset(
    name="gpfl-network",
    description="GPFL Fig. 5: the learned client network beside the clients' label "
                "distributions, and how much it links like-labelled clients",
    variants=[Variant("gpfl", "gpfl")],
    datasets=["NCI1/k=25/alpha=0.5", "PROTEINS/k=25/alpha=0.5"], metrics=("acc",),
    base=[*SPLIT, *SHARED_REPEATS, *TRAINING], seeds=1, quick=QUICK, quick_seeds=1,
    setting_keys=SETTING_KEYS, folds=1, figures=[network_figures],
    notes="network-<setting>.png: N̂ averaged over the rounds, clients ordered by majority "
          "label (then by its share), beside each client's training label distribution. "
          "network.json: per setting the matrix in that order, the order, the distributions "
          "and the statistic: ratio = mean weight within majority-label groups / between "
          "them (1: blind to labels), correlation = Pearson of the weight with the pair's "
          "label similarity 1 - TV over client pairs i != j. The paper shows NCI1 only."))
