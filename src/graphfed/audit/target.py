"""The audited run: a finished run directory rebuilt in-process from its ``config.yaml`` (the same
partition, reused from the cache) and a seed's ``final.pt`` (loaded by graphfed's safe loader,
fingerprint checked), and the model it released: the final global model where the algorithm
has one, otherwise each client's deployed model. A Flower run's ``final.pt`` holds its server's
state only (its clients' states stayed on their nodes): it is audited where what it released
is the final global model."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import Tensor

from graphfed.checkpoints import fingerprint, load_checkpoint, load_server_state
from graphfed.config import ExperimentConfig
from graphfed.data.datasets import dataset_task
from graphfed.data.federated import ClientData, NodeClient
from graphfed.errors import GraphfedError
from graphfed.experiment import FINAL, Federation, build_federation, in_process, run_config
from graphfed.protocol import Client
from graphfed.runtime.simulation import SimulationRuntime
from graphfed.runtime.wrapped import ReplyChangingClient
from graphfed.tensors import Params, move_tensors

Released = Literal["global", "deployed"]
RELEASED = {"global": "the final global model",
            "deployed": "each client's deployed model (the algorithm has no global one)"}


@dataclass
class AuditedRun:
    """One seed of a finished run, rebuilt, with the parameters each client's model has."""

    run_dir: Path
    seed: int
    fed: Federation
    rounds: int  # the last round the seed ran (fewer than the config's where a budget stopped it)
    released: Released
    params: list[Params]  # per client, on its trainer's device

    @property
    def seed_dir(self) -> Path:
        return self.run_dir / f"seed-{self.seed}"

    @property
    def config(self) -> ExperimentConfig:
        return self.fed.config

    @property
    def runtime(self) -> SimulationRuntime:
        runtime = self.fed.runtime
        assert isinstance(runtime, SimulationRuntime)  # build_federation's own
        return runtime

    def outputs(self, client: int, splits: tuple[str, ...]) -> dict[str, tuple[Tensor, Tensor]]:
        """(logits, targets) of ``client``'s ``splits`` under its released model, run as
        deployed (node level: over the client's own graph)."""
        return released_outputs(self.fed, self.params, client, splits)

    def rng(self, *stream: int) -> np.random.Generator:
        """A generator of this audit's draws (candidate subsamples, non-edges), one per
        ``stream``, seeded by the audited seed: the same audit draws the same candidates."""
        return np.random.default_rng([self.seed, *stream])


def open_run(run_dir: Path, seed: int | None) -> tuple[ExperimentConfig, int]:
    """The config of a finished run directory (on any runtime) and the seed to audit (default:
    its first), or one ``GraphfedError`` saying why it cannot be audited."""
    config = run_config(run_dir)
    if dataset_task(config.dataset) != "classification":
        raise GraphfedError(f"graphfed audit attacks classifiers; {config.dataset} is a "
                            f"{dataset_task(config.dataset)} task")
    seeds = config.run_seeds
    seed = seeds[0] if seed is None else seed
    if seed not in seeds:
        raise GraphfedError(f"--seed {seed}: {run_dir} ran seeds "
                            f"{', '.join(map(str, seeds))}")
    seed_dir = run_dir / f"seed-{seed}"
    if not (seed_dir / "summary.json").is_file():
        raise GraphfedError(f"{seed_dir} is not finished (no summary.json); finish it with "
                            f"graphfed run --resume {run_dir}")
    if not (seed_dir / FINAL).is_file():
        raise GraphfedError(f"{seed_dir} keeps no {FINAL} (the state its run ended with, which "
                            "a graphfed older than the audit did not keep); run it again")
    return config, seed


def audited_run(run_dir: Path, config: ExperimentConfig, seed: int) -> AuditedRun:
    """Seed ``seed`` of ``run_dir`` (``open_run``'s) rebuilt in-process with the state it ended
    with and its released model."""
    path = run_dir / f"seed-{seed}" / FINAL
    if config.runtime == "simulation":
        fed = build_federation(config, seed)
        rounds, _ = load_checkpoint(path, fed)
    else:
        fed = build_federation(in_process(config), seed)
        rounds = load_server_state(path, fed, fingerprint(config, seed, fed.data),
                                   "put back the run's own copy, or run it again")
        if fed.runtime.server.global_params() is None:
            raise GraphfedError(f"{config.algorithm} has no global model: it released each "
                                f"client's deployed model, which on runtime={config.runtime} "
                                f"stayed on the clients' nodes ({path} keeps the server's "
                                "state only); graphfed audit attacks a Flower run only "
                                "where it released the final global model")
    released, params = released_params(fed, rounds)
    return AuditedRun(run_dir, seed, fed, rounds, released, params)


def released_params(fed: Federation, rounds: int) -> tuple[Released, list[Params]]:
    """What ``fed`` releases after round ``rounds`` and each client's copy of it on the
    client's device: the global model where the server has one, else what each client deploys
    (its ``evaluated_params`` given the server's evaluation message)."""
    runtime = fed.runtime
    assert isinstance(runtime, SimulationRuntime)
    contexts = runtime.contexts
    global_params = runtime.server.global_params()
    if global_params is not None:
        return "global", [move_tensors(global_params, ctx.trainer.device) for ctx in contexts]
    client = _unwrapped(runtime.client)
    messages = runtime.server.configure_evaluate(rounds, list(range(len(contexts))))
    deployed = []
    for ctx in contexts:
        params = client.evaluated_params(messages[ctx.client_id].to(ctx.trainer.device), ctx)
        if params is None:
            raise GraphfedError(f"{fed.config.algorithm} has no global model and its clients "
                                "score their own way (no parameters they deploy): graphfed "
                                "audit cannot rebuild the model it released")
        deployed.append(params)
    return "deployed", deployed


def _unwrapped(client: Client) -> Client:
    """The algorithm's own client under the wrappers that only change fit replies (DP noise,
    the attack simulation): what a client deploys is the algorithm's."""
    while isinstance(client, ReplyChangingClient):
        client = client.inner
    return client


def released_outputs(fed: Federation, params: list[Params], client: int,
                     splits: tuple[str, ...]) -> dict[str, tuple[Tensor, Tensor]]:
    """(logits, targets) of ``client``'s ``splits`` under ``params[client]``."""
    runtime = fed.runtime
    assert isinstance(runtime, SimulationRuntime)
    ctx = runtime.contexts[client]
    return ctx.trainer.outputs(params[client], ctx.data, splits)


def item_ids(raw: ClientData, split: str) -> Tensor:
    """The dataset ids of ``raw``'s items of ``split`` (nodes or graphs), in the order its
    outputs list them."""
    if isinstance(raw, NodeClient):
        return raw.global_ids[getattr(raw.graph, f"{split}_mask")]
    return raw.global_ids[split]


def node_logits(fed: Federation, params: Params, client: int) -> Tensor:
    """Logits of every node of a node-level ``client``'s graph (evaluation mode, no
    gradients): what black-box queries of the released model about its nodes return."""
    runtime = fed.runtime
    assert isinstance(runtime, SimulationRuntime)
    ctx = runtime.contexts[client]
    data = ctx.node_data()
    ctx.trainer.model.eval()
    with torch.no_grad():
        return ctx.trainer.forward(params, data.batch_of(torch.arange(len(data.y),
                                                                      device=data.y.device)))
