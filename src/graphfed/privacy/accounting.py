"""(epsilon, delta) of composed Gaussian releases by Google's ``dp-accounting`` (the optional
extra ``graphfed[privacy]``), behind one clear error when it is missing."""

from __future__ import annotations

import importlib
import logging
import math
from collections.abc import Sequence
from types import ModuleType
from typing import Literal

from graphfed.errors import GraphfedError

Accountant = Literal["rdp", "pld"]
ACCOUNTANTS: tuple[Accountant, ...] = ("rdp", "pld")
PLD_DISCRETISATION = 1e-4  # the PLD accountant's value discretisation (its default)


def dp_accounting() -> ModuleType:
    """The ``dp_accounting`` package, or a one-line error saying how to install it."""
    try:
        module: ModuleType = importlib.import_module("dp_accounting")
    except ImportError:
        raise GraphfedError("the privacy ledger composes with dp-accounting, which is not "
                            "installed: pip install 'graphfed[privacy]'") from None
    return module


def gaussian_epsilon(groups: Sequence[tuple[float, float, int]], delta: float,
                     accountant: Accountant = "rdp") -> float:
    """epsilon at ``delta`` of the composition of every group (noise multiplier z, sampling
    rate q, count): ``count`` Gaussian releases of sensitivity 1 and std z, each on a Poisson
    sample of rate q (no sampling at q = 1). A group with z = 0 is no privacy: infinity."""
    groups = [g for g in groups if g[2] > 0]
    if not groups:
        return 0.0
    if any(z == 0 for z, _, _ in groups):
        return math.inf
    dp = dp_accounting()
    events = []
    for z, q, count in groups:
        event = dp.GaussianDpEvent(z)
        if q < 1:
            event = dp.PoissonSampledDpEvent(q, event)
        events.append(dp.SelfComposedDpEvent(event, count))
    ledger = (dp.rdp.RdpAccountant() if accountant == "rdp" else
              dp.pld.PLDAccountant(value_discretization_interval=PLD_DISCRETISATION))
    absl = logging.getLogger("absl")  # RDP orders it cannot evaluate are left out, each logged
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        return float(ledger.compose(dp.ComposedDpEvent(events)).get_epsilon(delta))
    finally:
        absl.setLevel(level)
