"""(epsilon, delta) of composed Gaussian releases by Google's ``dp-accounting`` (the optional
extra ``graphfed[privacy]``), behind one clear error when it is missing."""

from __future__ import annotations

import functools
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
# above this RDP epsilon the PLD's discretisation coarsens in proportion (``pld_interval``)
PLD_COARSEN_ABOVE = 10.0


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
    sample of rate q (no sampling at q = 1). A group with z = 0 is no privacy: infinity.

    Answers are kept per (groups, delta, accountant): a summary asks for every round's own
    epsilon and every message's, which repeat the same composition, and each composition costs
    the accountant tenths of a second."""
    kept = tuple(sorted(g for g in groups if g[2] > 0))
    if not kept:
        return 0.0
    if any(z == 0 for z, _, _ in kept):
        return math.inf
    dp_accounting()  # its one-line error when it is missing, kept answer or not
    return _composed_epsilon(kept, delta, accountant)


@functools.lru_cache(maxsize=4096)
def _composed_epsilon(groups: tuple[tuple[float, float, int], ...], delta: float,
                      accountant: Accountant) -> float:
    dp = dp_accounting()
    events = []
    for z, q, count in groups:
        event = dp.GaussianDpEvent(z)
        if q < 1:
            event = dp.PoissonSampledDpEvent(q, event)
        events.append(dp.SelfComposedDpEvent(event, count))
    absl = logging.getLogger("absl")  # RDP orders it cannot evaluate are left out, each logged
    level = absl.level
    absl.setLevel(logging.ERROR)
    try:
        rdp = float(dp.rdp.RdpAccountant().compose(dp.ComposedDpEvent(events))
                    .get_epsilon(delta))
        if accountant == "rdp" or math.isinf(rdp):
            return rdp
        pld = dp.pld.PLDAccountant(value_discretization_interval=pld_interval(rdp))
        return float(pld.compose(dp.ComposedDpEvent(events)).get_epsilon(delta))
    finally:
        absl.setLevel(level)


def pld_interval(rdp_epsilon: float) -> float:
    """The PLD accountant's value discretisation for a composition whose RDP epsilon is
    ``rdp_epsilon``: its default, coarsened in proportion above ``PLD_COARSEN_ABOVE``. A small
    noise multiplier spreads the privacy loss over a range the default grid would need millions
    of points to cover (σ = 0.03 exhausts memory); the PLD's pessimistic discretisation keeps the
    epsilon an upper bound at any interval, and its error stays a fixed share of epsilon."""
    return PLD_DISCRETISATION * max(1.0, rdp_epsilon / PLD_COARSEN_ABOVE)
