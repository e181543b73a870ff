"""Config + seed -> the pieces of a run: the clients' data, the algorithm, its trainer and setup,
and a client's prepared context.

Shared by the in-process federation (``experiment``) and by every Flower node (``flower``), so a
client is assembled the same way wherever it runs, and seeded, so the server and every client
start from the same initial model in whatever process they are built.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch

from graphfed.algorithms.registry import Algorithm, check_task, get_algorithm
from graphfed.config import ConfigError, ExperimentConfig
from graphfed.data.datasets import GraphDataset, data_root, dataset_task, load_dataset
from graphfed.data.edges import edge_clients
from graphfed.data.features import row_normalized
from graphfed.data.federated import (
    ClientData,
    FederatedData,
    load_or_build_partition,
    materialize,
)
from graphfed.mechanisms.attacks import choose_attackers
from graphfed.models.by_level import build_model
from graphfed.privacy.options import DPRun
from graphfed.protocol import SERVER_DEVICE, Client, ClientContext, ClientSize, Server, Setup
from graphfed.runtime.attack import AttackingClient
from graphfed.runtime.base import clients_per_round
from graphfed.runtime.dp_client import LocalDPClient
from graphfed.seeding import preserved_rngs
from graphfed.training import PreparedClient, Trainer, prepare_client


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device=cuda but no CUDA device is available; use device=auto or cpu")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


@lru_cache(maxsize=4)
def _cached_dataset(name: str, options_json: str, root: str, features: str) -> GraphDataset:
    """One load per dataset, options, data root and feature treatment (``root`` keys the cache
    only: a process that points GRAPHFED_DATA elsewhere loads from there)."""
    data = load_dataset(name, json.loads(options_json) or None)
    return row_normalized(data) if features == "row_normalized" else data


def config_dataset(config: ExperimentConfig) -> GraphDataset:
    """The dataset ``config`` names, loaded (or generated) once per process."""
    options = config.dataset_options
    return _cached_dataset(config.dataset, json.dumps(options, sort_keys=True), str(data_root()),
                           config.features)


def federated_data(config: ExperimentConfig, seed: int) -> FederatedData:
    """The clients of this config and seed (the partition artifact is built once, then reused;
    at the edge level each client's edges are then split, from the same seed)."""
    data = config_dataset(config)
    partition_seed = config.partition.seed if config.partition.seed is not None else seed
    artifact = load_or_build_partition(data, config.partition, config.num_clients,
                                       partition_seed, config.dataset_options)
    clients = materialize(data, artifact)
    return (edge_clients(clients, config.edges, partition_seed) if config.level == "edge"
            else clients)


def build_algorithm(config: ExperimentConfig, seed: int, level: str, num_features: int,
                    num_classes: int, num_clients: int, device: torch.device
                    ) -> tuple[Algorithm, Trainer, Setup]:
    """The algorithm, trainer and Setup of one seed. Seeded, so the server and every client,
    in whatever process they are built, start from the same initial model."""
    seed_everything(seed)
    algorithm = get_algorithm(config.algorithm)
    check_task(algorithm, dataset_task(config.dataset), config.dataset)

    def make() -> torch.nn.Module:
        if algorithm.model is None:
            return build_model(level, num_features, num_classes, config.model)
        return algorithm.model(level, num_features, num_classes, config.model,
                               config.algorithm_options())

    check_model_fits(make, config, device)
    model = make()
    if config.init_seed is not None and config.init_seed != seed:
        model.load_state_dict(_initial_state(make, config.init_seed))
    model = model.to(device)
    optimizer = (config.optimizer if algorithm.optimizer is None
                 else algorithm.optimizer(config.optimizer, config.algorithm_options()))
    trainer = Trainer(model, optimizer, num_classes, config.eval_train_split)
    setup = Setup(level=level, num_clients=num_clients, num_classes=num_classes,
                  initial_params=trainer.initial_params(),
                  options=config.algorithm_options(), local_epochs=config.local_epochs,
                  batch_size=config.batch_size, aggregation=config.aggregation,
                  optimizer=optimizer, network=model, scored=config.client_eval,
                  dp=DPRun(config.dp, clients_per_round(config.client_fraction, num_clients))
                  if config.dp.enabled else None,
                  secure_aggregation=config.secure_aggregation
                  if config.secure_aggregation.enabled else None)
    return algorithm, trainer, setup


def check_model_fits(make: Callable[[], torch.nn.Module], config: ExperimentConfig,
                     device: torch.device) -> None:
    """Refuse, before anything is allocated, a model whose weights alone exceed the memory free
    on ``device``: the allocator's own refusal is a traceback, and a size the operating system
    grants lazily ends in the out-of-memory killer mid-run. The model is built on the meta
    device (shapes only, the caller's random streams kept) to count its bytes."""
    try:
        with preserved_rngs(), torch.device("meta"):
            model = make()
    except (RuntimeError, NotImplementedError):  # a model that cannot be built on meta
        return
    size = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    free = free_memory(device)
    if free is None or size <= free:
        return
    options = config.model
    raise ConfigError(f"model.hidden={options.hidden} (model.layers={options.layers}) makes a "
                      f"{options.name} model of {size / 2**30:,.1f} GiB, more than the "
                      f"{free / 2**30:,.1f} GiB of memory free on {device}; choose a smaller "
                      "model.hidden")


def free_memory(device: torch.device) -> int | None:
    """Bytes free on ``device`` (a CUDA device's, or the host's: available memory within the
    cgroup's limit, where one is set); None where this cannot be told."""
    if device.type == "cuda":
        return torch.cuda.mem_get_info(device)[0]
    meminfo = _read("/proc/meminfo")
    available = next((int(line.split()[1]) * 1024 for line in meminfo.splitlines()
                      if line.startswith("MemAvailable:")), None)
    limit, used = _read("/sys/fs/cgroup/memory.max").strip(), _read(
        "/sys/fs/cgroup/memory.current").strip()
    if limit.isdigit() and used.isdigit():
        room = max(0, int(limit) - int(used))
        available = room if available is None else min(available, room)
    return available


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _initial_state(make: Callable[[], torch.nn.Module], init_seed: int) -> dict:
    """The weights ``make`` draws under ``init_seed``, drawn aside: the run's generators are
    left as the run seed set them, so only the initial model differs from the seed's own run."""
    with preserved_rngs():
        seed_everything(init_seed)
        return make().state_dict()


def attackers(config: ExperimentConfig, seed: int, num_clients: int) -> list[int]:
    """The clients the run's attack simulation makes malicious (none without ``attack``)."""
    if config.attack.fraction == 0:
        return []
    return choose_attackers(num_clients, config.attack.fraction, seed)


def build_client(config: ExperimentConfig, seed: int, algorithm: Algorithm, setup: Setup
                 ) -> Client:
    """The algorithm's client side, as every runtime runs it: wrapped by DP-FedAvg's local
    noise (``dp.where=client``), then by the attack simulation when the run has attackers
    (an attacker sends what it likes), so in-process and Flower clients behave alike."""
    client = algorithm.client(setup)
    if config.dp.enabled and config.dp.where == "client":
        client = LocalDPClient(client, config.dp)
    chosen = attackers(config, seed, setup.num_clients)
    return AttackingClient(client, config.attack, frozenset(chosen)) if chosen else client


def client_sizes(data: FederatedData) -> tuple[ClientSize, ...]:
    """Every client's size as the partition made it: what the server weighs replies by."""
    return tuple(ClientSize(c.num_samples("train"), c.num_nodes, c.num_samples("val"),
                            c.num_samples("test")) for c in data.clients)


def prepare_global_test(config: ExperimentConfig, trainer: Trainer,
                        global_test: ClientData | None) -> PreparedClient | None:
    """The shared global test set on the trainer's device, when the partition has one."""
    return None if global_test is None else prepare_client(global_test, trainer.model,
                                                           trainer.device, config.sampling)


def build_server(config: ExperimentConfig, algorithm: Algorithm, trainer: Trainer,
                 setup: Setup, data: FederatedData) -> Server:
    """The algorithm's server side: ``setup`` on ``SERVER_DEVICE`` with every client's size,
    and whatever its ``server_inputs`` takes from the partition (data only the operator holds),
    prepared on ``SERVER_DEVICE``, where the server keeps its state."""
    def on_server(part: ClientData) -> PreparedClient:
        return prepare_client(part, trainer.model, SERVER_DEVICE, config.sampling)

    inputs = {} if algorithm.server_inputs is None else algorithm.server_inputs(data, on_server)
    return algorithm.server(replace(setup.on(SERVER_DEVICE), client_sizes=client_sizes(data)),
                            **inputs)


def client_context(config: ExperimentConfig, trainer: Trainer, client_id: int,
                   data: ClientData, global_test: PreparedClient | None) -> ClientContext:
    """One client's context with its data prepared on the trainer's device and an empty state;
    it sees the global test set only when the run evaluates every client's model on it."""
    prepared = prepare_client(data, trainer.model, trainer.device, config.sampling)
    shared = global_test if config.client_global_eval else None
    return ClientContext(client_id, prepared, {}, trainer, shared)
