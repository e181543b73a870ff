"""Every registered algorithm, today's and each future one, meets the protocol's promises on the
CPU: its default options validate; two rounds on three clients of a small staged dataset of its
level run; every message crosses the boundary check and its counted bytes are its payload; the
same seed gives the same metrics; a run resumed from its round-1 checkpoint ends exactly as the
uninterrupted one. The list is the registry itself, so a new algorithm is checked on arrival.

An algorithm that cannot meet a check on several CPU threads declares it in
``Algorithm.exemptions`` with the reason; that check then runs on one thread, where it must hold
exactly. (Thread-order sums differ between runs only sometimes, so an expected failure would be
flaky; the one-thread run still proves the mechanism.)
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest
import torch

from graphfed.algorithms import registry
from graphfed.algorithms.registry import FAMILIES, Algorithm, load_all
from graphfed.config import load_config
from graphfed.experiment import build_federation, resume_experiment, run_experiment
from graphfed.protocol import Message
from tests.conftest import interrupted_run, require

ALGORITHMS = load_all()
DATASET = {"node": ["dataset=Cora", "partition=metis"],
           "graph": ["dataset=MUTAG", "partition=dirichlet", "model=gin"]}
# smaller generator and fewer of its rounds keep FedSage+ at a few seconds; every other
# algorithm runs on its defaults
FASTER = {"fedsage+": ["fedsage+.fgen_hidden=[32]", "fedsage+.gen_rounds=2"]}
CHECKS = ("same_seed", "resume")  # the checks an exemption may move to one thread


def _overrides(algorithm: Algorithm, *extra: str) -> list[str]:
    level = algorithm.levels[0]
    return [f"algorithm={algorithm.name}", *DATASET[level], "num_clients=3", "rounds=2",
            "device=cpu", "checkpoint_every=1", *FASTER.get(algorithm.name, []), *extra]


def _marks(name: str) -> list:
    return [require("Cora" if ALGORITHMS[name].levels[0] == "node" else "MUTAG")]


def _cases() -> list:
    return [pytest.param(name, marks=_marks(name), id=name) for name in sorted(ALGORITHMS)]


def _engine_cases() -> list:
    """Every algorithm on the sequential engine, and those registered ``batched`` also on the
    batched one (id ``<name>-batched``)."""
    out = []
    for name in sorted(ALGORITHMS):
        out.append(pytest.param(name, "sequential", marks=_marks(name), id=name))
        if ALGORITHMS[name].batched:
            out.append(pytest.param(name, "batched", marks=_marks(name), id=f"{name}-batched"))
    return out


@pytest.fixture
def threads_for(request):
    """Runs the test on one CPU thread for an algorithm that declares the check exempt."""
    def pin(name: str, check: str) -> None:
        if check in dict(ALGORITHMS[name].exemptions):
            before = torch.get_num_threads()
            torch.set_num_threads(1)
            request.addfinalizer(lambda: torch.set_num_threads(before))
    return pin


def test_every_exemption_names_a_check_and_says_why():
    for algorithm in ALGORITHMS.values():
        for check, reason in algorithm.exemptions:
            assert check in CHECKS and len(reason) > 20, (algorithm.name, check)


def test_conformance_metadata_and_files_follow_the_registry():
    """Each name lives in the module named after it, which registers it on import: the lookup
    that imports one module only (a Flower node's) finds every algorithm."""
    for name, algorithm in ALGORITHMS.items():
        assert algorithm.paper and algorithm.family in FAMILIES and algorithm.levels, name
        module = importlib.import_module(registry.module_path(name))
        registered = {v.name for v in vars(module).values() if isinstance(v, Algorithm)}
        assert name in registered, (name, module.__name__)


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


@pytest.mark.parametrize(("name", "engine"), _engine_cases())
def test_conformance_boundary_and_bytes(name, engine, monkeypatch):
    fed = build_federation(load_config(None, _overrides(ALGORITHMS[name], f"engine={engine}")), 0)
    runtime = fed.runtime
    sent: list[tuple[int, int]] = []  # (down, up) of every delivery

    def recording(deliver):
        def wrapped(*args):
            messages = args[-1]
            replies, failed = deliver(*args)
            sent.append((sum(_payload(m) for m in messages.values()),
                         sum(_payload(m) for m in replies.values())))
            return replies, failed
        return wrapped

    monkeypatch.setattr(runtime, "deliver_fit", recording(runtime.deliver_fit))
    monkeypatch.setattr(runtime, "deliver_setup", recording(runtime.deliver_setup))
    lines = [line for line in [fed.setup()] if line is not None]
    lines += [fed.fit_round(rnd) for rnd in (1, 2)]
    assert all(line["dropped"] == {} for line in lines), [line["dropped"] for line in lines]
    assert all(line["answered"] == [0, 1, 2] for line in lines)
    assert [(line["bytes_down"], line["bytes_up"]) for line in lines] == sent
    evaluation = fed.evaluate(2)
    assert len(evaluation["clients"]) == 3 and 0.0 <= evaluation["test_acc"] <= 1.0


def _lines(run_dir: Path) -> list[dict]:
    drop = ("train_seconds", "eval_seconds")
    lines = (run_dir / "seed-0" / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in drop} for line in lines]


@pytest.mark.parametrize(("name", "engine"), _engine_cases())
def test_conformance_same_seed_same_metrics(name, engine, tmp_path, threads_for):
    threads_for(name, "same_seed")
    config = load_config(None, _overrides(ALGORITHMS[name], "name=run", f"engine={engine}"))
    first, _ = run_experiment(config, tmp_path / "a", progress=False)
    second, _ = run_experiment(config, tmp_path / "b", progress=False)
    assert _lines(first) == _lines(second)


@pytest.mark.parametrize(("name", "engine"), _engine_cases())
def test_conformance_resume_from_round_1_equals_uninterrupted(name, engine, tmp_path,
                                                               threads_for):
    threads_for(name, "resume")
    config = load_config(None, _overrides(ALGORITHMS[name], "name=run", f"engine={engine}"))
    whole, _ = run_experiment(config, tmp_path / "whole", progress=False)
    cut = interrupted_run(config, tmp_path / "cut", at_round=2)
    torch.manual_seed(12345)  # the resumed run must not depend on the process's RNG state
    resumed, _ = resume_experiment(cut, progress=False)
    assert _lines(resumed) == _lines(whole)
