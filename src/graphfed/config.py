"""Validated experiment configs: a YAML file plus ``key=value`` overrides.

Every problem (unknown key, wrong type, impossible combination) becomes one ConfigError whose
message names the key and the valid choices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from graphfed.algorithms.registry import Algorithm, get_algorithm, load_all
from graphfed.data.datasets import SYNTHETIC, canonical_name, dataset_level
from graphfed.data.partition import (
    PARTITIONS,
    LouvainPartition,
    PartitionOptions,
    check_partition_level,
)
from graphfed.data.sampling import WHOLE_GRAPH_WEIGHTS, SamplingOptions
from graphfed.data.synthetic import CSBMOptions
from graphfed.errors import GraphfedError
from graphfed.mechanisms.attacks import AttackOptions
from graphfed.mechanisms.robust import AggregationOptions, check_rule
from graphfed.models.gnn import MODEL_LEVELS, SPARSE_INPUT_MODELS, ModelOptions
from graphfed.protocol import AlgorithmOptions
from graphfed.runtime.base import clients_per_round
from graphfed.runtime.flower_options import FlowerOptions
from graphfed.training.trainer import OptimizerOptions
from graphfed.validation import OPTIONS, Seed, did_you_mean


class ConfigError(GraphfedError):
    pass


def _named(value: Any) -> Any:
    """Accept ``model: gcn`` as shorthand for ``model: {name: gcn}`` (likewise partition)."""
    return {"name": value} if isinstance(value, str) else value


class ExperimentConfig(BaseModel):
    model_config = OPTIONS

    name: str | None = Field(None, description="run name (default: derived from the config)")
    dataset: str = Field("Cora", description="dataset name (graphfed datasets lists them)")
    algorithm: str = Field("fedavg", description="algorithm name (graphfed algorithms lists "
                           "them); its options are the section of that name")
    model: ModelOptions = Field(default_factory=ModelOptions)
    partition: PartitionOptions = Field(default_factory=LouvainPartition)
    num_clients: int = Field(10, ge=1, description="clients the partition makes")
    rounds: int = Field(100, ge=1, description="federated rounds (fit, then evaluate)")
    client_fraction: float = Field(1.0, gt=0.0, le=1.0,
                                   description="share of clients sampled each round")
    local_epochs: int = Field(1, ge=1, description="epochs of local training per round")
    batch_size: int | None = Field(None, ge=1, description="None: full batch")
    sampling: SamplingOptions = Field(default_factory=SamplingOptions)
    optimizer: OptimizerOptions = Field(default_factory=OptimizerOptions)
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
    client_global_eval: bool = Field(
        False, description="also evaluate every client's model on the global test set")
    checkpoint_every: int = Field(10, ge=0, description="0: never")
    engine: Literal["sequential", "batched"] = Field(
        "sequential", description="in-process runtime: train the sampled clients one after "
        "another, or together in one stacked pass (the algorithms registered batched: "
        "graphfed algorithms --json; a client the engine cannot batch trains alone)")
    cuda_graphs: bool = Field(
        False, description="with engine=batched on a CUDA device: record a group's local "
        "training as a CUDA graph the second time the same clients train on whole graphs "
        "(node level, full batch), then replay it, one launch for hundreds (timed on an H200: "
        "docs/performance.md)")
    runtime: Literal["simulation", "flower-sim", "flower"] = Field(
        "simulation", description="simulation: in-process; flower-sim: Flower's simulation "
        "engine; flower: a SuperLink and its SuperNodes")
    flower: FlowerOptions = Field(default_factory=FlowerOptions)
    aggregation: AggregationOptions = Field(
        default_factory=AggregationOptions, description="how an averaging-family server "
        "combines the replies (rule: mean, median, trimmed_mean, krum, multi_krum, norm_clip)")
    attack: AttackOptions = Field(
        default_factory=AttackOptions, description="simulated attackers: a share of the "
        "clients (fraction) that send sign-flipped, scaled or random updates or lie about size")
    csbm: CSBMOptions | None = None
    methods: dict[str, AlgorithmOptions] = Field(
        default_factory=dict, description="per-algorithm option sections, e.g. fedprox.mu")

    @model_validator(mode="before")
    @classmethod
    def _collect_method_sections(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key in ("model", "partition"):
            if key in data:
                data[key] = _named(data[key])
        partition = data.get("partition")
        if partition is None or (isinstance(partition, dict) and "name" not in partition):
            data["partition"] = {"name": _default_partition(data.get("dataset", "Cora")),
                                 **(partition or {})}
        methods = dict(data.pop("methods", None) or {})
        known = set(cls.model_fields)
        for key in list(data):
            if key in known:
                continue
            if _is_algorithm(key):
                methods[key] = data.pop(key)
            else:
                valid = sorted(known - {"methods"}) + sorted(load_all())
                raise ValueError(f"unknown key {key!r}{did_you_mean(key, valid)}; valid keys: "
                                 f"{', '.join(valid)}")
        data["methods"] = methods
        return data

    @field_validator("dataset")
    @classmethod
    def _known_dataset(cls, v: str) -> str:
        return canonical_name(v)

    @field_validator("name")
    @classmethod
    def _one_folder_name(cls, v: str | None) -> str | None:
        """A run name is a folder inside the output directory, never a path out of it."""
        if v is not None and (not v.strip() or v in (".", "..") or any(
                c in v for c in ("/", "\\", "\0")) or v != v.strip()):
            raise ValueError(f"{v!r} is not a folder name: no path separators, not '.' or "
                             "'..', no surrounding spaces")
        return v

    @field_validator("algorithm")
    @classmethod
    def _known_algorithm(cls, v: str) -> str:
        return get_algorithm(v).name

    @field_validator("methods", mode="before")
    @classmethod
    def _validate_sections(cls, v: dict) -> dict:
        out: dict = {}
        spelled: dict[str, str] = {}
        for name, section in v.items():
            algorithm = get_algorithm(name)  # a section under any spelling is the algorithm's
            if algorithm.name in out:
                raise ValueError(f"{spelled[algorithm.name]!r} and {name!r} both set "
                                 f"{algorithm.name}'s options; use one")
            try:
                out[algorithm.name] = algorithm.options.model_validate(section or {})
            except ValidationError as e:
                raise ValueError(_format_errors(e, prefix=(name,))) from None
            spelled[algorithm.name] = name
        return out

    @field_validator("seeds")
    @classmethod
    def _nonempty_seeds(cls, v: list[int] | None) -> list[int] | None:
        if v is not None and (not v or len(set(v)) != len(v)):
            raise ValueError("seeds must be a non-empty list of distinct integers")
        return v

    @model_validator(mode="after")
    def _check_combinations(self) -> ExperimentConfig:
        level = self.level
        algorithm = get_algorithm(self.algorithm)
        if level not in algorithm.levels:
            raise ValueError(
                f"algorithm '{self.algorithm}' is for {'/'.join(algorithm.levels)}-level tasks "
                f"but dataset '{self.dataset}' is {level}-level")
        if level not in MODEL_LEVELS[self.model.name]:
            valid = sorted(m for m, levels in MODEL_LEVELS.items() if level in levels)
            raise ValueError(f"model '{self.model.name}' does not fit the {level}-level dataset "
                             f"'{self.dataset}'; choose one of: {', '.join(valid)}")
        check_partition_level(self.partition, level)
        self._check_sampling(level)
        self._check_sparse_features(level, algorithm)
        if algorithm.check is not None:
            algorithm.check(self)
        if self.client_global_eval and not self.partition.has_global_test:
            raise ValueError("client_global_eval needs a global test set "
                             "(partition.global_test > 0)")
        if self.cuda_graphs and (self.engine != "batched" or self.runtime != "simulation"):
            raise ValueError("cuda_graphs records the batched engine's training: it needs "
                             "engine=batched and runtime=simulation")
        if self.csbm is not None and self.dataset not in SYNTHETIC:
            raise ValueError("the csbm section applies only to dataset=csbm")
        if self.runtime == "flower" and self.flower.owner_keys is None:
            raise ValueError("runtime=flower needs flower.owner_keys: the directory of the "
                             "owners' public keys (owner-<i>.pub), so the server knows which "
                             "node is which client")
        self._check_robustness(algorithm.family)
        return self

    def _check_robustness(self, family: str) -> None:
        rule = self.aggregation.rule
        if rule != "mean" and family != "averaging":
            averaging = sorted(n for n, a in load_all().items() if a.family == "averaging")
            raise ValueError(f"aggregation.rule={rule} applies to the averaging family "
                             f"({', '.join(averaging)}); algorithm '{self.algorithm}' is "
                             f"{family}")
        check_rule(self.aggregation, clients_per_round(self.client_fraction, self.num_clients))
        attack = self.attack
        if attack.fraction > 0 and round(attack.fraction * self.num_clients) == 0:
            raise ValueError(f"attack.fraction={attack.fraction} of {self.num_clients} clients "
                             "rounds to no attacker")

    def _check_sampling(self, level: str) -> None:
        fanouts = self.sampling.fanouts
        if self.sampling.evaluate == "sampled" and not fanouts:
            raise ValueError("sampling.evaluate=sampled needs sampling.fanouts, e.g. [6, 6]")
        if fanouts and level != "node":
            raise ValueError("sampling.fanouts samples node neighbourhoods; graph-level "
                             f"dataset '{self.dataset}' trains on whole graphs")
        if fanouts and get_algorithm(self.algorithm).model is None and self.model.name == "gcn":
            raise ValueError(f"sampling.fanouts: gcn {WHOLE_GRAPH_WEIGHTS}")

    def _check_sparse_features(self, level: str, algorithm: Algorithm) -> None:
        """Sparse features reach only a model whose first step is a linear map, over the whole
        client graph, in an algorithm that reads features through that model alone: ``true``
        is refused elsewhere, ``auto`` becomes true where it can and false otherwise."""
        wanted = self.model.sparse_features
        if wanted is False:
            return
        obstacle = self._sparse_obstacle(level, algorithm)
        if wanted == "auto":
            self.model = self.model.model_copy(update={"sparse_features": obstacle is None})
        elif obstacle is not None:
            raise ValueError(f"model.sparse_features {obstacle}")

    def _sparse_obstacle(self, level: str, algorithm: Algorithm) -> str | None:
        """Why this run cannot take sparse features, or None."""
        if level != "node":
            return f"is for node-level datasets; '{self.dataset}' is {level}-level"
        if self.model.name not in SPARSE_INPUT_MODELS:
            return (f"needs a model whose first step is linear "
                    f"({', '.join(SPARSE_INPUT_MODELS)}), not '{self.model.name}'")
        if not algorithm.sparse_features:
            able = sorted(n for n, a in load_all().items() if a.sparse_features)
            return (f"does not apply: algorithm '{self.algorithm}' reads dense features; "
                    f"algorithms that take sparse ones: {', '.join(able)}")
        if self.sampling.fanouts:
            return "trains on the whole client graph; drop sampling.fanouts"
        if self.engine != "sequential" and self.model.name == "gat":
            return "with engine=batched serves gcn and mlp only, not gat"
        return None

    @property
    def level(self) -> str:
        return dataset_level(self.dataset)

    @property
    def run_seeds(self) -> list[int]:
        return self.seeds if self.seeds is not None else [self.seed]

    @property
    def dataset_options(self) -> dict | None:
        if self.dataset == "csbm":
            return (self.csbm or CSBMOptions()).model_dump()
        return None

    def algorithm_options(self) -> AlgorithmOptions:
        options = self.methods.get(self.algorithm)
        return options if options is not None else get_algorithm(self.algorithm).options()

    def to_dict(self) -> dict:
        data = self.model_dump(mode="json", exclude={"methods"})
        data.update({k: v.model_dump(mode="json") for k, v in self.methods.items()})
        return data


def _is_algorithm(name: str) -> bool:
    """Whether a top-level key names an algorithm (its option section)."""
    try:
        get_algorithm(name)
    except GraphfedError:
        return False
    return True


def _parse_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def apply_override(data: dict, key: str, value: Any) -> None:
    """Set ``a.b.c=value`` in ``data``; a string on a named section sets its ``name``."""
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
    last = parts[-1]
    if isinstance(node.get(last), dict) and isinstance(value, str):
        node[last] = _renamed(parts, node[last], value)
    else:
        node[last] = value


def _renamed(path: list[str], section: dict, name: str) -> dict:
    """A partition switched to another kind keeps only the keys that kind accepts, so
    ``partition=gcfl_chunk`` over a Dirichlet config does not trip on its ``alpha``."""
    kind = PARTITIONS.get(name) if path == ["partition"] else None
    if kind is None or section.get("name") == name:
        return {**section, "name": name}
    return {**{k: v for k, v in section.items() if k in kind.model_fields}, "name": name}


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


def _default_partition(dataset: Any) -> str:
    try:
        return "louvain" if dataset_level(str(dataset)) == "node" else "dirichlet"
    except GraphfedError:
        return "louvain"


def _section_class(loc: tuple) -> type[BaseModel] | None:
    """The options class a config path points into, to list its valid keys."""
    head = loc[0] if loc else None
    if head == "partition" and len(loc) > 1:
        return PARTITIONS.get(loc[1])
    sections = {"model": ModelOptions, "optimizer": OptimizerOptions, "csbm": CSBMOptions,
                "flower": FlowerOptions, "aggregation": AggregationOptions,
                "attack": AttackOptions}
    if head in sections:
        return sections[head]
    if isinstance(head, str) and _is_algorithm(head):
        return get_algorithm(head).options
    return None


def _format_errors(error: ValidationError, prefix: tuple = ()) -> str:
    lines = []
    for e in error.errors():
        loc = prefix + tuple(p for p in e["loc"] if not str(p).startswith("function-"))
        if loc[:1] == ("partition",) and len(loc) > 1 and loc[1] in PARTITIONS:
            section, shown = _section_class(loc), (loc[0], *loc[2:])
        else:
            section, shown = _section_class(loc), loc
        where = "" if shown == ("methods",) else ".".join(str(p) for p in shown)
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "union_tag_invalid":
            message = (f"unknown {where} {e['ctx']['tag']!r}; available: "
                       f"{', '.join(PARTITIONS)}")
        if e["type"] == "extra_forbidden":
            message = "unknown key"
            if section is not None:
                valid = sorted(section.model_fields)
                message += (f"{did_you_mean(str(loc[-1]), valid)}; valid keys: "
                            f"{', '.join(valid)}")
        got = e.get("input")
        quiet = ("value_error", "extra_forbidden", "union_tag_invalid")
        suffix = ("" if isinstance(got, dict) or e["type"] in quiet
                  else f" (got {got!r})")
        lines.append(f"{where}: {message}{suffix}" if where else f"{message}{suffix}")
    return "; ".join(lines)


def build_config(data: dict) -> ExperimentConfig:
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as e:
        raise ConfigError("invalid config: " + _format_errors(e)) from None
    except GraphfedError as e:
        raise ConfigError(f"invalid config: {e}") from None


def with_overrides(config: ExperimentConfig, overrides: dict[str, Any]) -> ExperimentConfig:
    """``config`` with dotted-key overrides (``{"flower.round_timeout": 45}``), validated like a
    config file."""
    data = config.to_dict()
    for key, value in overrides.items():
        apply_override(data, key, value)
    return build_config(data)


def _yaml_problem(error: yaml.YAMLError) -> str:
    """PyYAML's problem and where it is, on one line (its own message spans several)."""
    mark = getattr(error, "problem_mark", None)
    if mark is not None:
        return f"{error.problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(error).split())


def load_config(path: str | Path | None, overrides: list[str] = ()) -> ExperimentConfig:
    """Read a YAML config (or start from defaults) and apply ``key=value`` overrides."""
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
        apply_override(data, key, value)
    return build_config(data)
