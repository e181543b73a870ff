"""Runtimes: where an algorithm runs (in-process simulation now; Flower later)."""

from graphfed.runtime.base import RoundRecord, Runtime
from graphfed.runtime.simulation import SimulationRuntime

__all__ = ["RoundRecord", "Runtime", "SimulationRuntime"]
