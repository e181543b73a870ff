"""Transports: how a server's messages reach its clients. The round logic is shared
(``base``); ``simulation`` keeps every client in this process, ``flower`` reaches them through a
Flower Grid. A runtime knows neither the config nor the experiment."""

from graphfed.runtime.base import RoundRecord, Runtime
from graphfed.runtime.simulation import SimulationRuntime

__all__ = ["RoundRecord", "Runtime", "SimulationRuntime"]
