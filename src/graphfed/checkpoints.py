"""Checkpoints of one seed, and what a resume may continue from them.

A checkpoint is the state after a round (server, runtime, random streams), written atomically,
with the fingerprint of the run that made it: the canonical config (less ``RESUME_FREE_KEYS``,
plus the seed) and a hash of the partition. Loading checks every field first, so a checkpoint
of another run, or a damaged or edited one, is one ``GraphfedError`` naming what differs; a
resume keeps of ``metrics.jsonl`` only what the checkpoint continues from, repairing only what
it can prove is run again. A Flower run's checkpoints hold no client states (those stay on the
nodes): its server's state alone loads, into an in-process rebuild (``graphfed audit``).
"""

from __future__ import annotations

import hashlib
import io
import logging
import math
import random
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from graphfed.config import ExperimentConfig
from graphfed.data.federated import SPLITS, ClientData, FederatedData, NodeClient
from graphfed.errors import GraphfedError
from graphfed.runtime.base import Runtime
from graphfed.serialization import atomic_write, graph_classes, read_metrics_torn, safe_load

# config keys a resumed seed may differ in: where it runs and how it is filed, not what it
# computes (its own seed stands in for seed and seeds)
RESUME_FREE_KEYS = ("name", "device", "checkpoint_every", "seed", "seeds", "threads", "log")

log = logging.getLogger(__name__)


class Checkpointed(Protocol):
    """What a checkpoint saves and restores: one seed's federation (``experiment.Federation``)."""

    config: ExperimentConfig
    data: FederatedData
    runtime: Runtime

    @property
    def fingerprint(self) -> dict: ...


def fingerprint(config: ExperimentConfig, seed: int, data: FederatedData) -> dict:
    """What a checkpoint of this seed must have been made by: the canonical config (less
    ``RESUME_FREE_KEYS``, plus the seed) and a hash of who holds which item in which split.
    A checkpoint of another run would otherwise load into this one without a word."""
    settings = {k: v for k, v in config.to_dict().items() if k not in RESUME_FREE_KEYS}
    return {"config": {**settings, "seed": seed}, "partition": partition_digest(data)}


def partition_digest(data: FederatedData) -> str:
    """SHA-256 of the partition's assignment: every client's items with their train/val/test
    split, the global test set and the server's public pool, in order."""
    digest = hashlib.sha256(data.partition_id.encode())
    for holder in (*data.clients, data.global_test, data.public):
        digest.update(b"|")
        for tensor in _assignment(holder):
            digest.update(f"{tuple(tensor.shape)}".encode())
            digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _assignment(holder: ClientData | None) -> list[torch.Tensor]:
    if holder is None:
        return []
    if isinstance(holder, NodeClient):
        return [holder.global_ids, *(getattr(holder.graph, f"{s}_mask") for s in SPLITS)]
    return [holder.global_ids[s] for s in SPLITS]


def _rng_state() -> dict:
    name, keys, position, has_gauss, gauss = np.random.get_state()
    state = {"python": random.getstate(), "torch": torch.get_rng_state(),
             "numpy": (name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, gauss)}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def _set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    name, keys, position, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save_checkpoint(path: Path, fed: Checkpointed, rnd: int, seconds: float) -> None:
    """The state after round ``rnd``, written atomically: a crash or a full disk while it is
    written keeps the previous checkpoint whole."""
    state = {"round": rnd, "seconds": seconds, "fingerprint": fed.fingerprint,
             "server": fed.runtime.server.state_dict(), "runtime": fed.runtime.state_dict(),
             "rng": _rng_state()}
    buffer = io.BytesIO()  # serialised first: torch.save reports a full disk as a RuntimeError
    torch.save(state, buffer)
    atomic_write(path, buffer.getbuffer())


CHECKPOINT_KEYS = ("round", "seconds", "server", "runtime", "rng")
RNG_KEYS = {"python", "torch", "numpy"}  # and "cuda" where the run had a CUDA device


def load_checkpoint(path: Path, fed: Checkpointed) -> tuple[int, float]:
    """Load ``path`` into ``fed``; its round and seconds so far. Every field is checked first,
    so a checkpoint of another run, or a damaged or edited one, is one ``GraphfedError``."""
    remedy = (f"delete it to run {path.parent.name} again from round 1, or put back a good "
              "copy, then resume")
    state = _checked_state(path, fed, fed.fingerprint, remedy, whole=True)

    def load() -> None:
        fed.runtime.server.load_state_dict(state["server"])
        fed.runtime.load_state_dict(state["runtime"])
        _set_rng_state(state["rng"])

    _restore(path, remedy, load)
    return state["round"], float(state["seconds"])


def load_server_state(path: Path, fed: Checkpointed, made_by: dict, remedy: str) -> int:
    """Load only the server's state of the checkpoint at ``path`` into ``fed``; its round.
    For a run whose clients trained on their own nodes (Flower): their states never reached the
    checkpoint, and ``fed`` may run otherwise than the writer did, so the checkpoint is checked
    against ``made_by``, the fingerprint of the run that wrote it, and ``remedy`` closes each
    refusal."""
    state = _checked_state(path, fed, made_by, remedy, whole=False)
    _restore(path, remedy, lambda: fed.runtime.server.load_state_dict(state["server"]))
    return state["round"]


def _checked_state(path: Path, fed: Checkpointed, made_by: dict, remedy: str, whole: bool
                   ) -> dict:
    """The checkpoint at ``path``, read by the safe loader, with every field checked for
    ``fed`` (``_checkpoint_problem``), or one ``GraphfedError`` ending in ``remedy``."""
    state = safe_load(path, "checkpoint", graph_classes(), map_location="cpu", remedy=remedy)
    if not isinstance(state, dict) or any(k not in state for k in CHECKPOINT_KEYS):
        raise GraphfedError(f"{path} is not a graphfed checkpoint; {remedy}")
    problem = _checkpoint_problem(state, fed, made_by, whole)
    if problem is not None:
        raise GraphfedError(f"{path} {problem}; {remedy}")
    return state


def _restore(path: Path, remedy: str, load: Callable[[], None]) -> None:
    """Run ``load``; a state that does not fit the objects it loads into is one
    ``GraphfedError``."""
    try:
        load()
    except (GraphfedError, LookupError, TypeError, ValueError, RuntimeError) as e:
        detail = " ".join(str(e).split())[:160]
        raise GraphfedError(f"{path} does not fit this run ({type(e).__name__}: {detail}); "
                            f"{remedy}") from None


def _checkpoint_problem(state: dict, fed: Checkpointed, made_by: dict, whole: bool
                        ) -> str | None:
    """What is wrong with a loaded checkpoint's fields for ``fed``, made by the run of
    fingerprint ``made_by`` (None: nothing); all of it with ``whole``, else the server's
    part."""
    theirs = state.get("fingerprint")
    if not isinstance(theirs, dict):
        return "has no fingerprint of the run it belongs to (an older graphfed wrote it)"
    if theirs.get("config") != made_by["config"]:
        return f"belongs to another run: {_differences(theirs.get('config'), made_by['config'])}"
    if theirs.get("partition") != made_by["partition"]:
        return (f"belongs to another partition of {fed.data.dataset}: its clients held other "
                f"items than this run's partition {fed.data.partition_id} (the dataset or the "
                "partition code changed since it was written)")
    rounds, rnd, seconds = fed.config.rounds, state["round"], state["seconds"]
    if not _is_int(rnd) or not 1 <= rnd <= rounds:
        return f"has round {rnd!r}; this run's checkpoints hold a round from 1 to {rounds}"
    if not (_is_int(seconds) or isinstance(seconds, float)) or not (
            math.isfinite(seconds) and seconds >= 0):
        return f"has seconds {seconds!r}, not a finite number of seconds"
    parts = {"server": set(fed.runtime.server.state_dict())}
    if whole:
        parts.update(runtime=set(fed.runtime.state_dict()), rng=RNG_KEYS)
    for key, expected in parts.items():
        got = state[key]
        if not isinstance(got, dict) or not expected <= set(got) <= expected | {"cuda"}:
            return f"holds no {key} state of this run"
    clients = state["runtime"].get("clients") if whole else None
    if isinstance(clients, list) and len(clients) != fed.data.num_clients:
        return f"holds {len(clients)} client states; this run has {fed.data.num_clients} clients"
    return None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _flat(data: object, prefix: str = "") -> dict[str, object]:
    """``{"model": {"hidden": 64}}`` as ``{"model.hidden": 64}``."""
    if not isinstance(data, dict):
        return {prefix: data}
    out: dict[str, object] = {}
    for key, value in data.items():
        out.update(_flat(value, f"{prefix}.{key}" if prefix else str(key)))
    return out


def _differences(theirs: object, mine: dict, shown: int = 3) -> str:
    """The config keys two fingerprints differ in, with both values: 'model.hidden=32 (this run:
    64)'."""
    a, b = _flat(theirs), _flat(mine)
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k, "unset") != b.get(k, "unset"))
    parts = [f"{k}={a.get(k, 'unset')} (this run: {b.get(k, 'unset')})" for k in keys[:shown]]
    more = f" and {len(keys) - shown} more" if len(keys) > shown else ""
    return "its config has " + ", ".join(parts) + more


def resumed_lines(metrics_path: Path, ckpt_path: Path, done: int) -> list[dict]:
    """The records of rounds 0 (setup, if any) to ``done`` that a resume from the checkpoint of
    round ``done`` keeps. What it can prove is replayed is dropped, and logged: a torn last line
    (a crash or a full disk while appending) and rounds after the checkpoint's. Anything else
    that does not match the checkpoint is an error saying what to do."""
    remedy = f"delete {ckpt_path} to run {ckpt_path.parent.name} again from round 1"
    if not metrics_path.is_file():
        raise GraphfedError(f"{metrics_path} is missing, but {ckpt_path} continues after round "
                            f"{done}; {remedy}")
    try:
        records, torn = read_metrics_torn(metrics_path)
    except GraphfedError as e:
        raise GraphfedError(f"{e}; {remedy}") from None
    kept = [r for r in records if r["round"] <= done]
    rounds = [r["round"] for r in kept]
    if rounds[:1] == [0]:  # the setup exchange
        rounds = rounds[1:]
    if rounds != list(range(1, done + 1)):
        damage = f"{torn}, and the lines before it record" if torn else f"{metrics_path} records"
        raise GraphfedError(f"{damage} rounds {_spans(rounds)}, not rounds 1-{done} that "
                            f"{ckpt_path} continues from; {remedy}")
    later = [r["round"] for r in records if r["round"] > done]
    if torn or later:
        what = ["a torn last line (a write cut short)"] if torn else []
        what += [f"rounds {_spans(later)} (after the checkpoint's)"] if later else []
        log.warning("resuming %s from its checkpoint of round %d: dropped %s from %s; round %d "
                    "on runs again", ckpt_path.parent, done, " and ".join(what),
                    metrics_path.name, done + 1)
    return kept


def _spans(rounds: list[int]) -> str:
    """``[1, 2, 3, 5]`` as '1-3, 5' (what a message can show of a long list)."""
    spans: list[list[int]] = []
    for rnd in rounds:
        if spans and rnd == spans[-1][1] + 1:
            spans[-1][1] = rnd
        else:
            spans.append([rnd, rnd])
    return ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in spans) or "none"
