"""Where a run goes: in-process (``experiment``) or on Flower (``flower.launch``), by the config's
``runtime``. The CLI, ``reproduce`` and the Python API start runs here, so no layer below has to
know that Flower exists."""

from __future__ import annotations

from pathlib import Path

from graphfed.config import ExperimentConfig
from graphfed.experiment import resume_experiment, run_experiment
from graphfed.flower.launch import run_on_flower


def run(config: ExperimentConfig, out: str | Path = "runs", progress: bool = True
        ) -> tuple[Path, dict]:
    """Run every seed of ``config`` on its runtime; the run directory and its summary."""
    if config.runtime == "simulation":
        return run_experiment(config, out, progress)
    return run_on_flower(config, Path(out), progress)


def resume(run_dir: str | Path, progress: bool = True) -> tuple[Path, dict]:
    """Continue an interrupted in-process run from its checkpoints."""
    return resume_experiment(run_dir, progress)
