"""The algorithm registry: every algorithm registers itself by name at the foot of its module.

File names follow registry names (``d-fedgnn`` lives in ``d_fedgnn.py``, ``fedsage+`` in
``fedsage_plus``), so looking a name up imports that one module and nothing else: a Flower
ClientApp process pays only for its own algorithm. Listing every algorithm (``graphfed
algorithms``, an unknown name's error, the conformance test) imports them all by walking the
package, with no hand-kept list to forget a module in.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal, Protocol

from torch import nn

from graphfed.errors import GraphfedError
from graphfed.protocol import AlgorithmOptions, Client, Server
from graphfed.training import OptimizerOptions
from graphfed.validation import did_you_mean, loose

Family = Literal["averaging", "personalized", "clustered", "rewards"]
FAMILIES: dict[str, str] = {
    "averaging": "one global model, averaged (servers extend FedAvgServer)",
    "personalized": "each client keeps its own model (clients extend PersonalClient)",
    "clustered": "one model per cluster of clients (servers extend GCFLServer)",
    "rewards": "gradient rewards by contribution (servers extend RewardServer)",
}

# level, in_dim, classes, ModelOptions, the algorithm's own options -> the network
ModelFactory = Callable[[str, int, int, Any, AlgorithmOptions], nn.Module]
# the run's optimizer options, the algorithm's own options -> what its clients train with
OptimizerRule = Callable[[OptimizerOptions, AlgorithmOptions], OptimizerOptions]


class RunView(Protocol):
    """What an algorithm's ``check`` may read of a run's config (the config layer sits above
    the algorithms, so they see it through this view)."""

    @property
    def level(self) -> str: ...

    model: Any
    sampling: Any
    num_clients: int
    rounds: int
    client_fraction: float

    def algorithm_options(self) -> AlgorithmOptions: ...


Check = Callable[[RunView], None]


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm: its two sides, its options and what it is for.

    ``check`` raises ``ValueError`` (with a readable message) for a config the method cannot run
    beyond its ``levels``, e.g. a model or sampling it does not support; the config layer calls
    it, so method-specific rules live with the method."""

    name: str
    server: type[Server]
    client: type[Client]
    options: type[AlgorithmOptions]
    family: Family
    paper: str
    levels: tuple[str, ...] = ("node", "graph")
    description: str = ""
    model: ModelFactory | None = None  # a method-defined network instead of config.model
    optimizer: OptimizerRule | None = None  # a method-defined local optimizer (SCAFFOLD's SGD)
    aliases: tuple[str, ...] = ()
    check: Check | None = None
    batched: bool = False  # its clients' fit is Client.fit_by_step: the batched engine applies
    # its clients read node features only through the model (or sparse-aware code of their
    # own): model.sparse_features applies
    sparse_features: bool = False


REGISTRY: dict[str, Algorithm] = {}
ALIASES: dict[str, str] = {}


def register(algorithm: Algorithm) -> Algorithm:
    REGISTRY[algorithm.name] = algorithm
    for alias in algorithm.aliases:
        ALIASES[alias] = algorithm.name
    return algorithm


def module_name(name: str) -> str:
    """The module an algorithm name lives in: ``fedsage+`` -> ``fedsage_plus``."""
    return name.lower().replace("+", "_plus").replace("-", "_")


@cache
def _modules() -> dict[str, str]:
    """Short module name -> dotted path of every module under ``graphfed.algorithms``, found
    on disk without importing any of them."""
    found: dict[str, str] = {}

    def walk(path: Path, prefix: str) -> None:
        for info in pkgutil.iter_modules([str(path)]):
            found.setdefault(info.name, prefix + info.name)
            if info.ispkg:
                walk(path / info.name, f"{prefix}{info.name}.")

    walk(Path(__file__).parent, "graphfed.algorithms.")
    return found


def module_path(name: str) -> str:
    """The dotted module ``name`` is registered in (``GraphfedError`` when there is none)."""
    found = _modules().get(module_name(name))
    if found is None:
        raise GraphfedError(f"no module {module_name(name)}.py under graphfed.algorithms")
    return found


def load_all() -> dict[str, Algorithm]:
    """Import every algorithm module (registering each); returns the registry."""
    for dotted in _modules().values():
        importlib.import_module(dotted)
    return REGISTRY


def get_algorithm(name: str) -> Algorithm:
    """The algorithm registered as ``name`` (or an alias of it), in any case and with or
    without separators (``validation.loose``)."""
    name = ALIASES.get(name, name)
    if name not in REGISTRY and module_name(name) in _modules():
        importlib.import_module(module_path(name))
    if name not in REGISTRY:
        load_all()
        name = ALIASES.get(name, name)
    if name not in REGISTRY:
        by_loose = {loose(known): known for known in (*REGISTRY, *ALIASES)}
        found = by_loose.get(loose(name))
        if found is None:
            raise GraphfedError(f"unknown algorithm {name!r}{did_you_mean(name, REGISTRY)}; "
                                f"available: {', '.join(sorted(REGISTRY))}")
        name = ALIASES.get(found, found)
    return REGISTRY[name]
