"""Test set-up: real staged datasets from GRAPHFED_DATA (default ../shared/datasets)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
os.environ.setdefault("GRAPHFED_DATA", str((REPO / ".." / "shared" / "datasets").resolve()))
# each pytest-xdist worker processes datasets into a cache of its own: PyG writes a dataset's
# processed files in place, and two workers building the same one at once would race
_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
os.environ.setdefault("GRAPHFED_CACHE",
                      str(REPO / ".cache" / (f"graphfed-{_WORKER}" if _WORKER else "graphfed")))
if _WORKER:  # one CPU thread a worker (and for what it starts): OpenMP threads that outnumber the
    # cores spin against each other and cost more than the workers gain
    os.environ["OMP_NUM_THREADS"] = "1"


# the longest files (real Flower processes, full trainings) are handed out first, so that under
# `pytest -n 2 --dist loadfile` no worker is left with one of them after the other is done
LONGEST_FIRST = ("test_flower_deployment.py", "test_flower.py", "test_experiment.py")


def pytest_configure(config: pytest.Config) -> None:
    if _WORKER:
        import torch

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the order within and after the longest files is kept


def require(name: str):
    """Skip (with the reason) when a dataset's files are not staged."""
    from graphfed.data.datasets import is_present

    return pytest.mark.skipif(not is_present(name),
                              reason=f"dataset {name} not present under GRAPHFED_DATA")


@pytest.fixture(scope="session")
def cora():
    from graphfed.data import load_dataset

    if not _present("Cora"):
        pytest.skip("Cora not present under GRAPHFED_DATA")
    return load_dataset("Cora")


@pytest.fixture(scope="session")
def proteins():
    from graphfed.data import load_dataset

    if not _present("PROTEINS"):
        pytest.skip("PROTEINS not present under GRAPHFED_DATA")
    return load_dataset("PROTEINS")


@contextmanager
def cpu_threads(count: int) -> Iterator[None]:
    """PyTorch's CPU thread count set to ``count`` for the block and set back after it, so no
    other test runs on it."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _present(name: str) -> bool:
    from graphfed.data.datasets import is_present

    return is_present(name)


def interrupted_run(config, out: Path, at_round: int) -> Path:
    """Run ``config`` into ``out`` and stop it (as a crash would) when round ``at_round`` starts;
    returns the run directory, whose checkpoints a resume continues from."""
    from graphfed import experiment

    original = experiment.Federation.fit_round

    def stop(self, rnd):
        if rnd == at_round:
            raise KeyboardInterrupt
        return original(self, rnd)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(experiment.Federation, "fit_round", stop)
        with pytest.raises(KeyboardInterrupt):
            experiment.run_experiment(config, out, progress=False)
    return out / config.name


def evaluated_after(overrides: list[str], rounds: int = 2):
    """The in-process runtime of a federation built from ``overrides`` after its setup exchange
    (if any) and ``rounds`` fit rounds, and the per-client records of an evaluation after the
    last one."""
    from graphfed.config import load_config
    from graphfed.experiment import build_federation

    fed = build_federation(load_config(None, overrides), 0)
    fed.setup()
    for rnd in range(1, rounds + 1):
        fed.fit_round(rnd)
    return fed.runtime, fed.evaluate(rounds)["clients"]


PYG_PROGRESS = {"Processing...", "Done!"}  # PyG's own stderr lines while it processes


def refused_run(tmp_path: Path, *overrides: str) -> str:
    """The one error line of ``graphfed run`` on the quickstart with ``overrides``, after
    checking that the refusal left no run directory behind."""
    from typer.testing import CliRunner

    from graphfed.cli import app

    result = CliRunner().invoke(app, ["run", "configs/quickstart.yaml", *overrides, "--out",
                                      str(tmp_path / "r"), "--quiet"])
    line = error_line(result)
    assert not (tmp_path / "r").exists()
    return line


def error_line(result) -> str:
    """The one line a refused CLI command printed (PyG's progress lines aside), after checking
    the promise: exit code 2, no traceback, one line starting "error: "."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines()
             if line.strip() and line.strip() not in PYG_PROGRESS]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def wait_for(condition, timeout: float, what: str, poll: float = 0.3) -> None:
    """Until ``condition()`` holds; the test fails naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s"
        time.sleep(poll)
