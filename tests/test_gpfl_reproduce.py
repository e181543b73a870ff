"""GPFL's reproduction: repeats that share a split and an initial model (``init_seed``), setting
labels, the fold axis, per-metric selectors, and the ``gpfl-table2`` preset."""

import pytest
import torch

from graphfed.config import load_config
from graphfed.experiment import build_federation
from tests.conftest import require

SMALL = ["dataset=PROTEINS", "model=gin", "algorithm=fedavg", "partition=gpfl_dirichlet",
         "partition.seed=0", "num_clients=3", "batch_size=64", "device=cpu"]


def _federation(seed: int, *overrides: str):
    return build_federation(load_config(None, [*SMALL, *overrides]), seed)


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@require("PROTEINS")
def test_seeds_with_one_init_seed_start_alike_and_train_apart():
    first, second = _federation(0, "init_seed=0"), _federation(1, "init_seed=0")
    assert _same(first.runtime.server.global_params(), second.runtime.server.global_params())
    first.fit_round(1)
    second.fit_round(1)
    assert not _same(first.runtime.server.global_params(),
                     second.runtime.server.global_params())


@require("PROTEINS")
def test_an_unset_init_seed_keeps_each_seeds_own_run():
    default, explicit = _federation(1), _federation(1, "init_seed=1")
    assert _same(default.runtime.server.global_params(),
                 explicit.runtime.server.global_params())
    shared = _federation(1, "init_seed=0")
    assert _same(_federation(0).runtime.server.global_params(),
                 shared.runtime.server.global_params())
    assert not _same(default.runtime.server.global_params(),
                     shared.runtime.server.global_params())
    default.fit_round(1)
    explicit.fit_round(1)  # init_seed equal to the seed: the very same run
    assert _same(default.runtime.server.global_params(),
                 explicit.runtime.server.global_params())
