"""GPFL's split (``partition=gpfl_dirichlet``, spec gpfl.md §4, §7.2.3) on the real PROTEINS and
NCI1: equal client sizes, capped priors, the fill loop's label skew, per-client stratified folds."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.data import build_partition, load_dataset, parse_partition
from graphfed.data.partition.gpfl import capped_priors
from graphfed.data.partition.plan import TEST, TRAIN
from tests.conftest import error_line, require

FOLDS = 5


def gpfl(data, num_clients: int = 25, seed: int = 0, **options):
    return build_partition(data, parse_partition({"name": "gpfl_dirichlet", **options}),
                           num_clients, seed)


def graph_labels(data) -> torch.Tensor:
    return torch.cat([g.y for g in data.graphs])


def label_distance(artifact, labels: torch.Tensor) -> float:
    """Mean total-variation distance between each client's label distribution and the global."""
    overall = torch.bincount(labels).double() / len(labels)
    distances = []
    for ids in artifact.client_ids:
        counts = torch.bincount(labels[ids], minlength=len(overall)).double()
        distances.append(0.5 * float((counts / counts.sum() - overall).abs().sum()))
    return float(np.mean(distances))


@pytest.fixture(scope="module")
def nci1():
    return load_dataset("NCI1")


@require("PROTEINS")
def test_clients_are_equal_size_with_the_remainder_on_the_first(proteins):
    sizes = [len(ids) for ids in gpfl(proteins).client_ids]
    assert sizes == [45] * 13 + [44] * 12  # 1,113 = 25 x 44 + 13


@require("PROTEINS")
def test_every_graph_is_in_exactly_one_client_and_nothing_is_held_out(proteins):
    artifact = gpfl(proteins)
    every = torch.cat(artifact.client_ids)
    assert torch.equal(every.sort().values, torch.arange(len(proteins.graphs)))
    assert len(artifact.global_test_ids) == 0
    assert all(set(s.tolist()) <= {TRAIN, TEST} for s in artifact.client_splits)  # no val


@require("PROTEINS")
def test_deterministic_for_a_seed_and_different_for_another(proteins):
    a, b, c = gpfl(proteins, seed=3), gpfl(proteins, seed=3), gpfl(proteins, seed=4)
    assert a.id == b.id != c.id
    for x, y in zip(a.client_ids + a.client_splits, b.client_ids + b.client_splits, strict=True):
        assert torch.equal(x, y)
    assert any(not torch.equal(x, y) for x, y in zip(a.client_ids, c.client_ids, strict=True))


@require("PROTEINS")
def test_each_graph_is_tested_in_exactly_one_fold_with_stratified_test_sets(proteins):
    labels = graph_labels(proteins)
    plans = [gpfl(proteins, fold=f) for f in range(FOLDS)]
    assert len({p.id for p in plans}) == FOLDS  # each fold is its own cached partition
    for client in range(25):
        ids = plans[0].client_ids[client]
        tested = torch.zeros(len(ids), dtype=torch.long)
        for plan in plans:
            assert torch.equal(plan.client_ids[client], ids)  # the folds share the clients
            splits = plan.client_splits[client]
            tested += splits == TEST
            counts = torch.bincount(labels[ids], minlength=2)
            in_test = torch.bincount(labels[ids][splits == TEST], minlength=2)
            assert ((in_test - counts / FOLDS).abs() < 1).all()
        assert (tested == 1).all()  # train and test split the client's graphs, disjointly


@require("NCI1")
def test_priors_are_capped_so_tiny_alpha_still_mixes_classes(nci1):
    raw = np.random.RandomState(0).dirichlet([1e-2, 1e-2], size=25)
    priors = capped_priors(1e-2, 2, 25, np.random.RandomState(0))
    over = raw.max(axis=1) > 0.95  # 23 of 25 rows, most of them exactly [0, 1]
    assert over.sum() == 23
    assert np.allclose(np.sort(priors[over], axis=1), [0.05, 0.95])
    assert np.array_equal(priors[~over], raw[~over])
    labels = graph_labels(nci1)
    shares = [float(torch.bincount(labels[ids], minlength=2).min()) / len(ids)
              for ids in gpfl(nci1, alpha=1e-2).client_ids]
    # 164+ graphs at a 5 % minority prior: no NCI1 client is one class (measured min 1.2 %,
    # mean 9.5 %, the excess from classes running out late in the fill)
    assert min(shares) > 0 and np.mean(shares) > 0.05


@require("PROTEINS")
@require("NCI1")
@pytest.mark.parametrize("dataset", ["PROTEINS", "NCI1"])
def test_large_alpha_gives_label_distributions_closer_to_the_global_one(dataset, proteins, nci1):
    data = proteins if dataset == "PROTEINS" else nci1
    labels = graph_labels(data)
    # measured mean TV distance, k = 25, seed 0: PROTEINS .213 / .105, NCI1 .256 / .139
    assert label_distance(gpfl(data, alpha=0.5), labels) > label_distance(
        gpfl(data, alpha=5.0), labels) + 0.05


BAD = [
    (["partition.fold=5"], "fold 5 does not exist with folds=5; choose 0 .. 4"),
    (["partition.folds=1"], "partition.folds: Input should be greater than or equal to 2"),
    (["partition.alpha=0"], "partition.alpha: Input should be greater than 0"),
    (["partition.global_test=0.1"], "gpfl_dirichlet has no global test set"),
    (["num_clients=300"], "leaves 3 per client, fewer than partition.folds=5"),
    (["partition.alpha=1e-4"], "is too small for NumPy's legacy Dirichlet draw"),
]


@require("PROTEINS")
@pytest.mark.parametrize(("overrides", "message"), BAD)
def test_bad_settings_exit_with_one_line(tmp_path, overrides, message):
    result = CliRunner().invoke(app, [
        "partition", "dataset=PROTEINS", "model=gin", "partition=gpfl_dirichlet", *overrides])
    assert message in error_line(result)


@require("PROTEINS")
def test_a_run_on_the_split_evaluates_test_folds_and_no_validation(tmp_path):
    result = CliRunner().invoke(app, [
        "run", "dataset=PROTEINS", "algorithm=fedavg", "model=gin", "partition=gpfl_dirichlet",
        "partition.alpha=0.5", "num_clients=25", "rounds=1", "--out", str(tmp_path), "--quiet"])
    assert result.exit_code == 0, result.output
    [summary] = tmp_path.glob("*/summary.json")
    final = json.loads(summary.read_text())["final"]
    assert 0 <= final["test_acc"] <= 1
    assert not any(key.startswith("val_") for key in final)
