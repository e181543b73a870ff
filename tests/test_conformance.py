"""Every registered algorithm, today's and each future one, meets the protocol's promises on the
CPU: its default options validate; two rounds on three clients of a small staged dataset of its
level run; every message crosses the boundary check and its counted bytes are its payload; the
same seed gives the same numbers to the last bit, metrics and every party's state, whatever the
CPU thread count (two runs on two threads, one on one thread); a run resumed from its round-1
checkpoint ends exactly as the uninterrupted one. The list is the registry itself, so a new
algorithm is checked on arrival, with the settings its registration declares: its short-run
overrides (``Algorithm.small_run``), the batched engine where it is registered ``batched``, and
each of its option modes (``Algorithm.modes``) that change what a party keeps or sends, and
each task it declares beyond classification (``Algorithm.tasks``: regression on ESOL, id
``<name>-regression``), and the edge level where it declares it (``Algorithm.levels``: link
prediction on Cora's edges, id ``<name>-edge``).
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from torch_geometric.data import Data

from graphfed.algorithms import registry
from graphfed.algorithms.registry import FAMILIES, Algorithm, load_all
from graphfed.config import ConfigError, load_config
from graphfed.experiment import build_federation, resume_experiment, run_experiment
from graphfed.messages import Message
from tests.conftest import cpu_threads, interrupted_run, require

ALGORITHMS = load_all()
DATASET = {"node": ["dataset=Cora", "partition=metis"],
           "graph": ["dataset=MUTAG", "partition=dirichlet", "model=gin"],
           "edge": ["dataset=Cora", "partition=metis", "model=gcn", "level=edge"]}
# the levels run as cases of their own where an algorithm declares them beyond its first, with
# the overrides that keep two rounds fast (a small encoder)
LEVEL_CASES = {"edge": [*DATASET["edge"], "model.hidden=16"]}
# the data of each task beyond classification, overriding the level's dataset
TASK_DATASET = {"regression": ["dataset=ESOL", "partition=uniform", "model=gin"]}
TIMINGS = ("train_seconds", "eval_seconds")


def _overrides(algorithm: Algorithm, *extra: str) -> list[str]:
    level = algorithm.levels[0]
    return [f"algorithm={algorithm.name}", *DATASET[level], "num_clients=3", "rounds=2",
            "device=cpu", "checkpoint_every=1", *algorithm.small_run, *extra]


def _marks(name: str) -> list:
    return [require("Cora" if ALGORITHMS[name].levels[0] == "node" else "MUTAG")]


def _task_marks(task: str) -> list:
    return [require("ESOL"), pytest.mark.skipif(importlib.util.find_spec("rdkit") is None,
                                                reason="rdkit not installed (graphfed[chem])")]


def _task_cases(name: str, *options: str) -> list:
    """A case (id ``<name>-<task>``) of each task ``name`` declares beyond classification."""
    return [pytest.param(name, [*TASK_DATASET[task], *options], marks=_task_marks(task),
                         id=f"{name}-{task}")
            for task in ALGORITHMS[name].tasks if task != "classification"]


def _level_cases(name: str, *options: str) -> list:
    """A case (id ``<name>-<level>``) of each of ``LEVEL_CASES``' levels ``name`` declares
    beyond its first."""
    return [pytest.param(name, [*LEVEL_CASES[level], *options], marks=[require("Cora")],
                         id=f"{name}-{level}")
            for level in ALGORITHMS[name].levels[1:] if level in LEVEL_CASES]


def _cases() -> list:
    return [pytest.param(name, marks=_marks(name), id=name) for name in sorted(ALGORITHMS)]


def _engine_cases() -> list:
    """Every algorithm on the sequential engine, those registered ``batched`` also on the
    batched one (id ``<name>-batched``), and each of its ``modes`` (id ``<name>-<mode>``): the
    overrides of each case."""
    out = []
    for name in sorted(ALGORITHMS):
        out.append(pytest.param(name, ["engine=sequential"], marks=_marks(name), id=name))
        if ALGORITHMS[name].batched:
            out.append(pytest.param(name, ["engine=batched"], marks=_marks(name),
                                    id=f"{name}-batched"))
        for mode, options in ALGORITHMS[name].modes.items():
            out.append(pytest.param(name, ["engine=sequential", *options], marks=_marks(name),
                                    id=f"{name}-{mode}"))
        out += _task_cases(name, "engine=sequential")
        out += _level_cases(name, "engine=sequential")
    return out


def test_conformance_metadata_and_files_follow_the_registry():
    """Each name lives in the module named after it, which registers it on import: the lookup
    that imports one module only (a Flower node's) finds every algorithm."""
    for name, algorithm in ALGORITHMS.items():
        assert algorithm.paper and algorithm.family in FAMILIES and algorithm.levels, name
        module = importlib.import_module(registry.module_path(name))
        registered = {v.name for v in vars(module).values() if isinstance(v, Algorithm)}
        assert name in registered, (name, module.__name__)


def test_a_server_that_averages_as_fedavg_reads_options_that_declare_what_fedavg_reads():
    """The registry pairs a server with its options at run time, out of the type checker's
    sight: a FedAvg-family server reads ``weighted``, so its options must declare it."""
    from graphfed.algorithms.averaging.fedavg import FedAvgOptions, FedAvgServer

    for name, algorithm in ALGORITHMS.items():
        if issubclass(algorithm.server, FedAvgServer):
            assert issubclass(algorithm.options, FedAvgOptions), name


@pytest.mark.parametrize("name", _cases())
def test_conformance_a_dataset_of_a_level_it_does_not_declare_is_refused(name):
    """The registry's ``levels`` are the one guard: the config refuses a dataset of any other
    level in one line, before the algorithm's own ``check`` runs."""
    algorithm = ALGORITHMS[name]
    for level in DATASET.keys() - set(algorithm.levels):
        with pytest.raises(ConfigError) as refused:
            load_config(None, [f"algorithm={name}", *DATASET[level]])
        message = str(refused.value)
        assert f"is for {'/'.join(algorithm.levels)}-level tasks" in message, message
        assert f"is {level}-level" in message and "\n" not in message, message


@pytest.mark.parametrize("name", _cases())
def test_conformance_defaults_validate(name):
    algorithm = ALGORITHMS[name]
    algorithm.options()  # every option has a default
    config = load_config(None, _overrides(algorithm))
    assert config.algorithm == name
    assert type(config.algorithm_options()) is algorithm.options


def _payload(message: Message) -> int:
    """Bytes a message carries, counted here independently of ``Message.nbytes``."""
    tensors = sum(t.numel() * t.element_size() for t in message.tensors.values())
    return tensors + 8 * len(message.scalars)


# the boundary test's run of each case, the same-bits test's first (same config, two threads):
# each case trains three times there, not four (file order puts the boundary test first; alone,
# the same-bits test trains it itself)
FIRST_RUNS: dict[str, dict] = {}


@pytest.mark.parametrize(("name", "options"), _engine_cases())
def test_conformance_boundary_and_bytes(name, options, monkeypatch, request):
    config = load_config(None, _overrides(ALGORITHMS[name], *options))
    sent: list[tuple[int, int]] = []  # (down, up) of every delivery

    def recording(deliver):
        def wrapped(*args):
            messages = args[-1]
            replies, failed = deliver(*args)
            sent.append((sum(_payload(m) for m in messages.values()),
                         sum(_payload(m) for m in replies.values())))
            return replies, failed
        return wrapped

    def recorded(config, seed):
        fed = build_federation(config, seed)
        monkeypatch.setattr(fed.runtime, "deliver_fit", recording(fed.runtime.deliver_fit))
        monkeypatch.setattr(fed.runtime, "deliver_setup", recording(fed.runtime.deliver_setup))
        return fed

    run = _two_rounds(config, 2, recorded)
    FIRST_RUNS[request.node.callspec.id] = run
    *fits, evaluation = run["lines"]
    lines = [line for line in fits if line is not None]
    assert all(line["dropped"] == {} for line in lines), [line["dropped"] for line in lines]
    assert all(line["answered"] == [0, 1, 2] for line in lines)
    assert [(line["bytes_down"], line["bytes_up"]) for line in lines] == sent
    assert len(evaluation["clients"]) == 3
    if "test_rmse" in evaluation:  # a regression task
        assert math.isfinite(evaluation["test_rmse"]) and evaluation["test_rmse"] >= 0.0
        return
    if "test_auc" in evaluation:  # link prediction
        assert 0.0 <= evaluation["test_auc"] <= 1.0 and "test_acc" not in evaluation
        return
    # a partition whose clients only train (FairGFL's) is scored on the global test set
    accuracy = evaluation.get("test_acc", evaluation.get("global_test_acc"))
    assert 0.0 <= accuracy <= 1.0


def _batched_cases() -> list:
    return [case for name in sorted(ALGORITHMS) if ALGORITHMS[name].batched
            for case in [pytest.param(name, [], marks=_marks(name), id=name),
                         *_task_cases(name), *_level_cases(name)]]


@pytest.mark.parametrize(("name", "options"), _batched_cases())
def test_conformance_the_batched_engine_trains_as_the_sequential_one(name, options):
    """An algorithm registered ``batched`` gives on the batched engine, dropout off, the bytes,
    training losses and every client's scores the sequential engine gives (within float
    rounding: the stacked pass sums in another order, ``tests/test_batched.py``)."""
    runs = {}
    for engine in ("sequential", "batched"):
        config = load_config(None, _overrides(ALGORITHMS[name], *options, "model.dropout=0",
                                              f"engine={engine}"))
        fed = build_federation(config, 0)
        lines = [fed.setup(), fed.fit_round(1), fed.fit_round(2)]
        runs[engine] = [line for line in lines if line is not None], fed.evaluate(2)["clients"]
    (sequential, seq_scores), (batched, batched_scores) = runs.values()
    for a, b in zip(sequential, batched, strict=True):
        assert (a["answered"], a["bytes_up"], a["bytes_down"]) == \
            (b["answered"], b["bytes_up"], b["bytes_down"])
        assert a.get("train_loss") == pytest.approx(b.get("train_loss"), abs=1e-5)
    for a, b in zip(seq_scores, batched_scores, strict=True):
        score = next(key for key in ("test_rmse", "test_auc", "test_acc") if key in a)
        assert a[score] == pytest.approx(b[score], abs=1e-5)
        assert a["val_loss"] == pytest.approx(b["val_loss"], abs=1e-5)


def _lines(run_dir: Path) -> list[dict]:
    lines = (run_dir / "seed-0" / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in TIMINGS} for line in lines]


def _two_rounds(config, threads: int, build=build_federation) -> dict:
    """The metrics of the setup, two rounds and an evaluation on ``threads`` CPU threads, and
    every party's state after them (the federation made by ``build``)."""
    with cpu_threads(threads):
        fed = build(config, 0)
        lines = [fed.setup(), fed.fit_round(1), fed.fit_round(2), fed.evaluate(2)]
        lines = [None if line is None else {k: v for k, v in line.items() if k not in TIMINGS}
                 for line in lines]
        return {"lines": lines, "server": fed.runtime.server.state_dict(),
                "clients": fed.runtime.state_dict()}


def _differences(a: Any, b: Any, path: str = "") -> list[str]:
    """Where two results differ in any bit: tensors as wholes, containers (and the PyG graphs a
    client may keep) entry by entry."""
    a, b = (x.to_dict() if isinstance(x, Data) else x for x in (a, b))
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return [] if a.dtype == b.dtype and torch.equal(a, b) else [path]
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return [d for k in a for d in _differences(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        pairs = enumerate(zip(a, b, strict=True))
        return [d for i, (x, y) in pairs for d in _differences(x, y, f"{path}[{i}]")]
    return [] if type(a) is type(b) and a == b else [path]


def test_differences_name_every_differing_leaf():
    ones = torch.ones(3)
    a = {"lines": [{"acc": 0.5}, None], "w": ones, "ids": (1, 2), "graph": Data(x=ones)}
    same = {"lines": [{"acc": 0.5}, None], "w": ones.clone(), "ids": (1, 2),
            "graph": Data(x=ones.clone())}
    assert _differences(a, same) == []
    last_bit = ones.nextafter(ones + 1)
    b = {"lines": [{"acc": 0.5000001}, None], "w": last_bit, "ids": (1, 3),
         "graph": Data(x=last_bit)}
    assert _differences(a, b) == [".lines[0].acc", ".w", ".ids[1]", ".graph.x"]


@pytest.mark.parametrize(("name", "options"), _engine_cases())
def test_conformance_same_seed_same_bits_on_one_or_two_threads(name, options, request):
    config = load_config(None, _overrides(ALGORITHMS[name], *options))
    two = FIRST_RUNS.pop(request.node.callspec.id, None) or _two_rounds(config, 2)
    assert _differences(_two_rounds(config, 2), two) == []
    assert _differences(_two_rounds(config, 1), two) == []


@pytest.mark.parametrize(("name", "options"), _engine_cases())
def test_conformance_resume_from_round_1_equals_uninterrupted(name, options, tmp_path):
    config = load_config(None, _overrides(ALGORITHMS[name], "name=run", *options))
    whole, _ = run_experiment(config, tmp_path / "whole", progress=False)
    cut = interrupted_run(config, tmp_path / "cut", at_round=2)
    torch.manual_seed(12345)  # the resumed run must not depend on the process's RNG state
    resumed, _ = resume_experiment(cut, progress=False)
    assert _lines(resumed) == _lines(whole)
