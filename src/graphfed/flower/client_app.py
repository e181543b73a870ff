"""The ClientApp: a graphfed ``Client`` run unchanged inside Flower.

A node finds its data in its node config: ``data-path`` (a file from ``graphfed partition
export``, on a real SuperNode) or ``partition-id`` (Flower's simulation engine, which loads the
run's cached partition). The client's persistent state (``ClientContext.state``) is serialised
into the node's Flower context state after every call, so it survives between rounds whether or
not the ClientApp process does. Fit messages pass Flower's SecAgg+ client mod, which acts on
those that carry its stages (``secure_aggregation``, ``runtime.secagg``); a secure sum of the
setup exchange's answers travels as such fit messages too, marked as answered by
``answer_setup``.
"""

from __future__ import annotations

import io
import json
import logging
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from flwr.app import ConfigRecord, Context, Error, RecordDict
from flwr.app import Message as FlowerMessage
from flwr.client.mod import secaggplus_mod
from flwr.clientapp import ClientApp
from flwr.clientapp.typing import ClientAppCallable
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS

from graphfed.allocator import keep_freed_memory
from graphfed.build import (
    build_algorithm,
    build_client,
    client_context,
    federated_data,
    prepare_global_test,
    resolve_device,
)
from graphfed.config import ExperimentConfig, build_config
from graphfed.flower.owner import OwnerData, load_owner
from graphfed.protocol import Client, ClientContext
from graphfed.runtime import records, secagg
from graphfed.runtime.base import answer_on_client
from graphfed.runtime.identity import sign_claim
from graphfed.seeding import preserved_rngs, seeded_call
from graphfed.serialization import graph_classes, safe_load

log = logging.getLogger("graphfed.runtime.flower")
STATE = "graphfed-state"
ERROR_CODE = 1


@dataclass
class Node:
    """A node's client for one run and seed: its algorithm side and its context, whose cache
    lives as long as this process (the state comes from the node's Flower context per call)."""

    client: Client
    context: ClientContext


@lru_cache(maxsize=4)
def _owner_file(path: str) -> OwnerData:
    return load_owner(path)


def _source(context: Context) -> str:
    """Where this node's data comes from: its own exported file, or a simulated partition."""
    node_config = context.node_config
    if "data-path" in node_config:
        return f"file:{node_config['data-path']}"
    return f"partition:{int(node_config['partition-id'])}"


def _owner_data(source: str, config: ExperimentConfig, seed: int) -> OwnerData:
    kind, where = source.split(":", 1)
    if kind == "file":
        return _owner_file(where)
    data = federated_data(config, seed)
    client_id = int(where)
    return OwnerData(client_id, data.num_clients, data.level, data.num_features,
                     data.num_classes, data.clients[client_id], data.global_test,
                     data.partition_id)


@lru_cache(maxsize=8)
def _config(text: str) -> ExperimentConfig:
    return build_config(json.loads(text))


@lru_cache(maxsize=4)
def _node(config_text: str, seed: int, source: str) -> Node:
    """Built once per process, run and seed (a pure function of them, so caching is safe)."""
    keep_freed_memory()  # this process trains: reuse freed activations (graphfed.allocator)
    config = _config(config_text)
    owner = _owner_data(source, config, seed)
    algorithm, trainer, setup = build_algorithm(config, seed, owner.level, owner.num_features,
                                                owner.num_classes, owner.num_clients,
                                                resolve_device(config.device))
    global_test = (prepare_global_test(config, trainer, owner.global_test)
                   if config.client_global_eval else None)
    return Node(build_client(config, seed, algorithm, setup),
                client_context(config, trainer, owner.client_id, owner.data, global_test))


def _load_state(context: Context, seed: int) -> dict[str, Any]:
    record = context.state.config_records.get(STATE)
    blob = None if record is None else record.get(f"seed-{seed}")
    return {} if blob is None else safe_load(bytes(blob), "client state", graph_classes())


def _save_state(context: Context, seed: int, state: dict[str, Any]) -> None:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    record = context.state.config_records.get(STATE) or ConfigRecord()
    record[f"seed-{seed}"] = buffer.getvalue()
    context.state[STATE] = record


def _answer(phase: str, message: FlowerMessage, context: Context) -> RecordDict:
    control = records.control(message.content)
    config_text, seed, rnd = str(control["config"]), int(control["seed"]), int(control["round"])
    node = _node(config_text, seed, _source(context))
    ctx = replace(node.context, state=_load_state(context, seed))
    request = records.decode(message.content)
    summed = control.get(secagg.SUMMED)  # a secure sum of this phase's answer ("setup", "fit")
    phase = phase if summed is None else str(summed)
    with seeded_call(seed, rnd, ctx.client_id, phase):
        if phase == "evaluate":
            metrics = answer_on_client(node.client.evaluate, request, ctx)
            content = records.encode_metrics(metrics)
        else:
            answer = node.client.answer_setup if phase == "setup" else node.client.fit
            reply = answer_on_client(answer, request, ctx)
            if summed is not None:
                content = secagg.sum_result(reply, with_loss=phase == "fit")
            elif secagg.WEIGHT in control:
                content = secagg.fit_result(request, reply, int(control[secagg.WEIGHT]))
            else:
                content = records.encode(reply, {})
    _save_state(context, seed, ctx.state)
    return content


def _reply(phase: str, message: FlowerMessage, context: Context) -> FlowerMessage:
    """Answer ``message``; a failure becomes an error reply the server logs and drops."""
    try:
        return FlowerMessage(_answer(phase, message, context), reply_to=message)
    except Exception as e:
        log.exception("graphfed client failed on a %s message", phase)
        return FlowerMessage(Error(ERROR_CODE, f"{type(e).__name__}: {e}"), reply_to=message)


def secure_aggregation(message: FlowerMessage, context: Context,
                       call_next: ClientAppCallable) -> FlowerMessage:
    """Flower's SecAgg+ client mod on the fit messages that carry its stages
    (``runtime.secagg``), others passing as they are. Right after the fit, NumPy's generator
    is seeded for the client's stochastic rounding, so the quantised update is the one the
    in-process runtime makes; the node's own generator states are kept around it."""
    if RECORD_KEY_CONFIGS not in message.content.config_records:
        return call_next(message, context)

    def fit_then_seed(request: FlowerMessage, node_context: Context) -> FlowerMessage:
        reply = call_next(request, node_context)
        if reply.has_error():  # the mod cannot mask an error: the node drops out of the round
            raise RuntimeError(reply.error.reason)
        control = records.control(request.content)
        seed = int(control["seed"])
        client = _node(str(control["config"]), seed, _source(node_context)).context.client_id
        np.random.seed(secagg.quantisation_seed(seed, int(control["round"]), client))
        return reply

    with preserved_rngs():
        return secaggplus_mod(message, context, fit_then_seed)


app = ClientApp()


@app.query()
def identify(message: FlowerMessage, context: Context) -> FlowerMessage:
    """Which graphfed client this node is and which partition its data comes from (the server
    maps Flower node ids to client ids and checks the partition), signed with the owner's key
    when the node has one (``key-path``), so the server can check the claim."""
    control = records.control(message.content)
    owner = _owner_data(_source(context), _config(str(control["config"])), int(control["seed"]))
    answer: dict[str, Any] = {"client": owner.client_id, "partition": owner.partition_id}
    if "key-path" in context.node_config:
        answer["signature"] = sign_claim(str(context.node_config["key-path"]),
                                         bytes(control["challenge"]), owner.client_id,
                                         owner.partition_id)
    return FlowerMessage(RecordDict({records.CONTROL: ConfigRecord(answer)}), reply_to=message)


@app.train("setup")
def setup(message: FlowerMessage, context: Context) -> FlowerMessage:
    return _reply("setup", message, context)


@app.train(mods=[secure_aggregation])
def fit(message: FlowerMessage, context: Context) -> FlowerMessage:
    return _reply("fit", message, context)


@app.evaluate()
def evaluate(message: FlowerMessage, context: Context) -> FlowerMessage:
    return _reply("evaluate", message, context)
