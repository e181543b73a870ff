"""A config as read, before any algorithm, model or dataset module is imported: the YAML file and
``key=value`` overrides as one mapping, the run's own settings (``RunSettings``), and the one-line
error format. ``graphfed run`` checks these first (``precheck``), so a mistyped setting or a bad
number fails in a fraction of a second instead of after torch and PyG have loaded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator

from graphfed.errors import GraphfedError
from graphfed.validation import OPTIONS, Seed, did_you_mean

Engine = Literal["auto", "batched", "sequential"]


class ConfigError(GraphfedError):
    pass


class RunSettings(BaseModel):
    """The settings of a run that no algorithm, model or dataset defines: checkable without
    importing any of them. ``config.ExperimentConfig`` adds the sections and the rules that
    combine them."""

    model_config = OPTIONS

    name: str | None = Field(None, description="run name (default: derived from the config)")
    dataset: str = Field("Cora", description="dataset name (graphfed datasets lists them)")
    features: Literal["as_loaded", "row_normalized"] = Field(
        "as_loaded", description="node features as the dataset gives them, or each row shifted "
        "by the features' minimum where it is negative and divided by its sum, as PyG's "
        "NormalizeFeatures (FED-PUB's and FedGCN's preprocessing)")
    algorithm: str = Field("fedavg", description="algorithm name (graphfed algorithms lists "
                           "them); its options are the section of that name")
    num_clients: int = Field(10, ge=1, description="clients the partition makes")
    rounds: int = Field(100, ge=1, description="federated rounds (fit, then evaluate)")
    client_fraction: float = Field(1.0, gt=0.0, le=1.0,
                                   description="share of clients sampled each round")
    local_epochs: int = Field(1, ge=1, description="epochs of local training per round")
    batch_size: int | None = Field(None, ge=1, description="None: full batch")
    seed: Seed = Field(0, description="seed of the run (partition, model, sampling)")
    seeds: list[Seed] | None = Field(None, description="run every seed; summary gives mean/std")
    init_seed: Seed | None = Field(
        None, description="seed of the initial model (default: the run seed); fixed, every "
        "seed starts from the same weights and differs only in training randomness, as "
        "repeats that share a split (partition.seed) and an initialisation do")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="where clients compute (the server stays on the CPU)")
    eval_every: int = Field(1, ge=1, description="evaluate every k rounds (and the last)")
    eval_train_split: bool = Field(
        False, description="also evaluate the model each client deploys on its training split "
        "(train_loss_deployed per client in metrics.jsonl); one more pass per evaluation")
    client_eval: Literal["deployed", "trained"] = Field(
        "deployed", description="the model each client is scored with: the one it deploys (the "
        "algorithm's choice; FedAvg's clients the global model they were sent), or the one its "
        "latest local training ended with, as FED-PUB's code scores its baselines "
        "(rnd_local_test_acc after the round's local epochs); trained needs an algorithm whose "
        "fit is a local step (registered batched)")
    client_global_eval: bool = Field(
        False, description="also evaluate every client's model on the global test set")
    checkpoint_every: int = Field(10, ge=0, description="0: never")
    engine: Engine = Field(
        "auto", description="how the in-process runtime trains the sampled clients: batched "
        "(together in one stacked pass; a client the engine cannot batch trains alone), "
        "sequential (one after another), or auto: batched wherever the algorithm (registered "
        "batched: graphfed algorithms --json), the model (not gat) and the run (no sampled "
        "neighbourhoods or node subsets, no persistent optimizer state) allow it. A resolved "
        "config holds the engine used, which summary.json records")
    threads: int = Field(
        1, ge=1, description="CPU threads torch computes with during the run (the numbers are "
        "the same on any count). One by default: on graphs this size more threads gain little "
        "on an idle machine and spin against other processes on a busy one (the quickstart "
        "took minutes instead of seconds on two threads under load); raise it for large "
        "graphs on a CPU of your own")
    cuda_graphs: bool = Field(
        False, description="with engine=batched on a CUDA device: record a group's local "
        "training as a CUDA graph the second time the same clients train on whole graphs "
        "(node level, full batch), then replay it, one launch for hundreds (timed on an H200: "
        "docs/performance.md)")
    runtime: Literal["simulation", "flower-sim", "flower"] = Field(
        "simulation", description="simulation: in-process; flower-sim: Flower's simulation "
        "engine; flower: a SuperLink and its SuperNodes")

    @field_validator("name")
    @classmethod
    def _one_folder_name(cls, v: str | None) -> str | None:
        """A run name is a folder inside the output directory, never a path out of it."""
        if v is not None and (not v.strip() or v in (".", "..") or any(
                c in v for c in ("/", "\\", "\0")) or v != v.strip()):
            raise ValueError(f"{v!r} is not a folder name: no path separators, not '.' or "
                             "'..', no surrounding spaces")
        return v

    @field_validator("seeds")
    @classmethod
    def _nonempty_seeds(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or len(set(v)) != len(v)):
            raise ValueError("seeds must be a non-empty list of distinct integers")
        return v


# section options class by name, for a path that switches a section to another kind
Kinds = Mapping[str, type[BaseModel]]


def _parse_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_override(data: dict, key: str, value: Any, partitions: Kinds | None = None) -> None:
    """Set ``a.b.c=value`` in ``data``; a string on a named section sets its ``name``. With
    ``partitions`` (kind name -> options class), a partition switched to another kind keeps
    only the keys that kind accepts, so ``partition=gcfl_chunk`` over a Dirichlet config does
    not trip on its ``alpha``."""
    parts = key.split(".")
    node = data
    for part in parts[:-1]:
        child = node.get(part)
        if isinstance(child, str):
            child = {"name": child}
        elif not isinstance(child, dict):
            child = {}
        node[part] = child
        node = child
    last, section = parts[-1], node.get(parts[-1])
    if not (isinstance(section, dict) and isinstance(value, str)):
        node[last] = value
        return
    kind = (partitions or {}).get(value) if parts == ["partition"] else None
    if kind is None or section.get("name") == value:
        node[last] = {**section, "name": value}
    else:
        node[last] = {**{k: v for k, v in section.items() if k in kind.model_fields},
                      "name": value}


def parse_overrides(items: list[str]) -> list[tuple[str, Any]]:
    out = []
    for item in items:
        if "=" not in item:
            raise ConfigError(f"override {item!r} is not of the form key=value")
        key, text = item.split("=", 1)
        if not key:
            raise ConfigError(f"override {item!r} has an empty key")
        out.append((key.strip(), _parse_value(text)))
    return out


def _yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's problem and where it is, on one line (its own message spans several)."""
    mark = getattr(error, "problem_mark", None)
    if mark is not None:
        return f"{getattr(error, 'problem', error)} at line {mark.line + 1}, column " \
               f"{mark.column + 1}"
    return " ".join(str(error).split())


def read_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = (),
                partitions: Kinds | None = None) -> dict:
    """The YAML file at ``path`` (none: an empty mapping) with ``key=value`` overrides
    applied, not yet validated."""
    data: dict = {}
    if path is not None:
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"config file '{path}' does not exist")
        try:
            data = yaml.safe_load(p.read_text(encoding="utf-8")) or {}
        except UnicodeDecodeError as e:
            raise ConfigError(f"config file '{path}' is not UTF-8 text (byte {e.start}: "
                              f"{e.reason}); is it a YAML file?") from None
        except OSError as e:
            raise ConfigError(f"config file '{path}' cannot be read ({e.strerror})") from None
        except yaml.YAMLError as e:
            raise ConfigError(f"config file '{path}' is not valid YAML: "
                              f"{_yaml_problem(e)}") from None
        if not isinstance(data, dict):
            raise ConfigError(f"config file '{path}' must hold a mapping of keys to values")
    for key, value in parse_overrides(list(overrides)):
        apply_override(data, key, value, partitions)
    return data


def format_errors(error: ValidationError, prefix: tuple = (),
                  section: Callable[[tuple], type[BaseModel] | None] = lambda loc: None,
                  kinds: Iterable[str] = ()) -> str:
    """A validation error as one line: each problem's dotted key, what is wrong and, for an
    unknown key, the valid ones of its ``section`` (the options class a path points into)
    with the closest. ``kinds``: the names a tagged section (the partition) may take."""
    lines = []
    for e in error.errors():
        loc = prefix + tuple(p for p in e["loc"] if not str(p).startswith("function-"))
        tagged = loc[:1] == ("partition",) and len(loc) > 1 and loc[1] in kinds
        shown = (loc[0], *loc[2:]) if tagged else loc
        where = "" if shown == ("methods",) else ".".join(str(p) for p in shown)
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "union_tag_invalid":
            message = f"unknown {where} {e['ctx']['tag']!r}; available: {', '.join(kinds)}"
        if e["type"] == "extra_forbidden":
            message = "unknown key"
            options = section(loc)
            if options is not None:
                valid = sorted(options.model_fields)
                message += (f"{did_you_mean(str(loc[-1]), valid)}; valid keys: "
                            f"{', '.join(valid)}")
        got = e.get("input")
        quiet = ("value_error", "extra_forbidden", "union_tag_invalid")
        suffix = ("" if isinstance(got, dict) or e["type"] in quiet
                  else f" (got {got!r})")
        lines.append(f"{where}: {message}{suffix}" if where else f"{message}{suffix}")
    return "; ".join(lines)


def precheck(path: str | Path | None, overrides: list[str]) -> None:
    """What can be refused before the heavy imports: an unreadable file or override, a bad
    value of a run setting, and a top-level key that is a near miss of a setting's name
    (``round=50``); the sections, the algorithm's options and their combinations are
    ``config.load_config``'s to check."""
    data = read_config(path, overrides)
    settings = RunSettings.model_fields
    for key in data:
        hint = did_you_mean(str(key), settings) if key not in settings else ""
        if hint:
            raise ConfigError(f"invalid config: unknown key {key!r}{hint}; every key: "
                              "graphfed config show")
    try:
        RunSettings.model_validate({k: v for k, v in data.items() if k in settings})
    except ValidationError as e:
        raise ConfigError("invalid config: " + format_errors(e)) from None
