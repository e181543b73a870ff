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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal, Protocol

from torch import nn

from graphfed.data.federated import ClientData, FederatedData
from graphfed.errors import GraphfedError
from graphfed.protocol import AlgorithmOptions, Client, Server
from graphfed.regression import TASKS
from graphfed.training import OptimizerOptions, PreparedClient
from graphfed.validation import did_you_mean, loose

Family = Literal["averaging", "personalized", "clustered", "rewards"]
# the ``tasks`` of an algorithm whose mechanism never reads a class, only the loss it is handed
ANY_TASK: tuple[str, ...] = TASKS
# the ``levels`` of such an algorithm that reads no classifier either (its layers are only
# "the model's"): node and graph classification, and link prediction (``level: edge``) on a
# node-level dataset's edges
ANY_LEVEL: tuple[str, ...] = ("node", "graph", "edge")
FAMILIES: dict[str, str] = {
    "averaging": "one global model, averaged (servers extend FedAvgServer)",
    "personalized": "each client keeps its own model (clients extend PersonalClient)",
    "clustered": "one model per cluster of clients (servers extend GCFLServer)",
    "rewards": "gradient rewards by contribution (servers extend RewardServer)",
}

# level, in_dim, classes, ModelOptions, the algorithm's own options -> the network (the options
# are its registered ``options`` class, which each factory names: Any here, where one type
# cannot pair them)
ModelFactory = Callable[[str, int, int, Any, Any], nn.Module]
# the run's optimizer options, the algorithm's own options -> what its clients train with
OptimizerRule = Callable[[OptimizerOptions, Any], OptimizerOptions]
# the partition, and how to prepare a part of it on the server's device -> keyword arguments of
# the algorithm's server beyond its Setup: data only the operator holds (a public node pool, a
# simulation's true statistics), which no other algorithm's Setup carries
ServerInputs = Callable[[FederatedData, Callable[[ClientData], PreparedClient]], dict[str, Any]]


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
    secure_aggregation: Any

    def algorithm_options(self) -> AlgorithmOptions: ...


Check = Callable[[RunView], None]

# the node-level mode of an algorithm that runs on graphs first (``Algorithm.modes``): what its
# server and clients exchange on one node-level graph differs from a batch of graphs
AT_NODE_LEVEL: tuple[str, ...] = ("dataset=Cora", "partition=metis", "model=gcn")


@dataclass(frozen=True)
class Algorithm:
    """A registered algorithm: its two sides, its options and what it is for.

    ``check`` raises ``ValueError`` (with a readable message) for a config the method cannot run
    beyond its ``levels``, e.g. a model or sampling it does not support; the config layer calls
    it, so method-specific rules live with the method.

    ``modes`` and ``small_run`` are what its tests need to know, declared here so that no test
    keeps a list of algorithms: the conformance test runs each mode (name -> config overrides,
    e.g. ``{"persistent": ("optimizer.persistent=true",)}``) as a case of its own wherever the
    option changes what a party keeps or sends, and every short test run adds ``small_run``, the
    overrides without which two rounds on three clients cannot run or take minutes."""

    name: str
    server: type[Server]
    client: type[Client]
    options: type[AlgorithmOptions]
    family: Family
    paper: str
    levels: tuple[str, ...] = ("node", "graph")
    # what its clients' targets may be (``graphfed.regression``): class labels, and real values
    # where its mechanism never reads a class (only the loss it is handed)
    tasks: tuple[str, ...] = ("classification",)
    description: str = ""
    model: ModelFactory | None = None  # a method-defined network instead of config.model
    optimizer: OptimizerRule | None = None  # a method-defined local optimizer (SCAFFOLD's SGD)
    aliases: tuple[str, ...] = ()
    check: Check | None = None
    batched: bool = False  # its clients' fit is Client.fit_by_step: the batched engine applies
    # its clients read node features only through the model (or sparse-aware code of their
    # own): model.sparse_features applies
    sparse_features: bool = False
    modes: Mapping[str, tuple[str, ...]] = field(default_factory=dict, hash=False)
    small_run: tuple[str, ...] = ()
    server_inputs: ServerInputs | None = None  # what its server takes from the partition


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


def catalogue() -> list[dict[str, Any]]:
    """Every registered algorithm as plain data, by family then name: what ``graphfed
    algorithms`` lists and the generated tables of the README and the docs show."""
    return [{"name": a.name, "aliases": list(a.aliases), "family": a.family,
             "levels": list(a.levels), "tasks": list(a.tasks), "paper": a.paper,
             "batched": a.batched,
             "modes": list(a.modes)}
            for a in sorted(load_all().values(), key=lambda a: (a.family, a.name))]


def markdown_table(rows: list[dict[str, Any]]) -> str:
    """``catalogue`` rows as the one-line-per-algorithm table of the README and the docs."""
    lines = ["| name | family | levels | tasks | paper |", "|---|---|---|---|---|"]
    for row in rows:
        names = f"`{row['name']}`" + "".join(f" (`{a}`)" for a in row["aliases"])
        lines.append(f"| {names} | {row['family']} | {', '.join(row['levels'])} | "
                     f"{', '.join(row['tasks'])} | {row['paper']} |")
    return "\n".join(lines)


def family_table(rows: list[dict[str, Any]]) -> str:
    """``catalogue`` rows as one line per family, the names only: the README's table, which
    stays a few lines long however many algorithms join (the docs show ``markdown_table``)."""
    names: dict[str, list[str]] = {}
    for row in rows:
        names.setdefault(row["family"], []).append(f"`{row['name']}`")
    return "\n".join(["| family | algorithms |", "|---|---|",
                      *(f"| {family} | {', '.join(members)} |"
                        for family, members in names.items())])


def check_task(algorithm: Algorithm, task: str, dataset: str) -> None:
    """Refuse, in one line naming those that can, a dataset whose task ``algorithm`` does not
    declare in its ``tasks``."""
    if task in algorithm.tasks:
        return
    able = sorted(n for n, a in load_all().items() if task in a.tasks)
    raise GraphfedError(f"algorithm '{algorithm.name}' is for {'/'.join(algorithm.tasks)} tasks "
                        f"but dataset '{dataset}' is a {task} task; algorithms for {task}: "
                        f"{', '.join(able)}")


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
