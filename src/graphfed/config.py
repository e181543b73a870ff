"""Validated experiment configs: a YAML file plus ``key=value`` overrides (read by
``config_file``), its sections and the rules that combine them, including which engine trains.

Every problem (unknown key, wrong type, impossible combination) becomes one ConfigError whose
message names the key and the valid choices.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator

from graphfed.algorithms.averaging.delivered import DeliveringServer
from graphfed.algorithms.averaging.fedavg import FedAvgServer
from graphfed.algorithms.registry import Algorithm, get_algorithm, load_all
from graphfed.config_file import (
    ConfigError,
    Engine,
    RunSettings,
    apply_override,
    format_errors,
    read_config,
)
from graphfed.data.datasets import SYNTHETIC, canonical_name, dataset_level
from graphfed.data.edges import EdgeOptions
from graphfed.data.federated import TaskLevel
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
from graphfed.privacy.dp_fedavg import dp_release
from graphfed.privacy.ledger import budget_exceeded
from graphfed.privacy.options import DPOptions, PrivacyOptions, update_noise_multiplier
from graphfed.privacy.secure_aggregation import (
    SecureAggregationOptions,
    SumsFit,
    SumsSetup,
    check_secure_aggregation,
)
from graphfed.protocol import AlgorithmOptions, Server
from graphfed.runtime.base import clients_per_round
from graphfed.runtime.flower_options import FlowerOptions
from graphfed.trackers import LogOptions
from graphfed.training.trainer import OptimizerOptions
from graphfed.validation import did_you_mean

# what makes a server's aggregate FedAvg's weighted mean of the updates of the model it sent
SECURE_HOOKS = ("configure_fit", "aggregate_fit", "weights", "average")


def _named(value: Any) -> Any:
    """Accept ``model: gcn`` as shorthand for ``model: {name: gcn}`` (likewise partition)."""
    return {"name": value} if isinstance(value, str) else value


class ExperimentConfig(RunSettings):
    """A validated experiment: the run's settings, its sections and the rules that combine
    them. Validating resolves what ``auto`` leaves open (``engine``, ``model.sparse_features``),
    so a run directory's ``config.yaml`` says what the run used."""

    level: TaskLevel = Field(
        "node", description="the task level: node, graph, or edge (link prediction on the "
        "edges of a node-level dataset: docs/task-levels.md); default the dataset's own")
    model: ModelOptions = Field(default_factory=ModelOptions)
    partition: PartitionOptions = Field(default_factory=LouvainPartition)
    sampling: SamplingOptions = Field(default_factory=SamplingOptions)
    optimizer: OptimizerOptions = Field(default_factory=OptimizerOptions)
    flower: FlowerOptions = Field(default_factory=FlowerOptions)
    aggregation: AggregationOptions = Field(
        default_factory=AggregationOptions, description="how an averaging-family server "
        "combines the replies (rule: mean, median, trimmed_mean, krum, multi_krum, norm_clip)")
    attack: AttackOptions = Field(
        default_factory=AttackOptions, description="simulated attackers: a share of the "
        "clients (fraction) that send sign-flipped, scaled or random updates or lie about size")
    dp: DPOptions = Field(
        default_factory=DPOptions, description="client-level differential privacy "
        "(DP-FedAvg) for the averaging family: noise_multiplier, clip, clipping, where, delta")
    privacy: PrivacyOptions = Field(
        default_factory=PrivacyOptions, description="the privacy ledger: its accountant (rdp, "
        "pld) and budget_epsilon, which stops a run before the round that would exceed it")
    secure_aggregation: SecureAggregationOptions = Field(
        default_factory=SecureAggregationOptions, description="SecAgg+ for the averaging "
        "family: the server learns only the weighted sum of the clients' updates (enabled, "
        "threshold, shares, clipping_range, quantization_bits, modulus_bits)")
    edges: EdgeOptions = Field(
        default_factory=EdgeOptions, description="level=edge: the shares of each client's "
        "edges that validate and test (val, test), the negatives drawn per training edge "
        "(train_negatives) or GAE's loss over every node pair instead (loss: full)")
    csbm: CSBMOptions | None = None
    log: LogOptions = Field(
        default_factory=LogOptions, description="experiment trackers each seed's rounds, "
        "config and summary also go to (trackers: tensorboard, mlflow); the run directory "
        "holds everything without them")
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
        if data.get("level") is None:
            data["level"] = _dataset_level(data.get("dataset", "Cora"))
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

    @model_validator(mode="after")
    def _check_combinations(self) -> ExperimentConfig:
        level = self._check_level()
        algorithm = get_algorithm(self.algorithm)
        self.methods.setdefault(algorithm.name, algorithm.options())  # its defaults, said
        subject = (f"dataset '{self.dataset}'" if level == dataset_level(self.dataset)
                   else f"this run (dataset '{self.dataset}', level={level})")
        if level not in algorithm.levels:
            raise ValueError(
                f"algorithm '{self.algorithm}' is for {'/'.join(algorithm.levels)}-level tasks "
                f"but {subject} is {level}-level")
        if level not in MODEL_LEVELS[self.model.name]:
            valid = sorted(m for m, levels in MODEL_LEVELS.items() if level in levels)
            raise ValueError(f"model '{self.model.name}' does not fit the {level}-level "
                             f"{subject}; choose one of: {', '.join(valid)}")
        check_partition_level(self.partition, dataset_level(self.dataset))
        self._check_edge_level(level)
        self._check_sampling(level)
        self.engine = choose_engine(self, algorithm)[0]
        self._check_sparse_features(level, algorithm)
        if algorithm.check is not None:
            algorithm.check(self)
        if self.client_eval == "trained" and not algorithm.batched:
            raise ValueError(f"client_eval=trained scores the model a client's local step ended "
                             f"with; algorithm '{algorithm.name}' trains otherwise (its fit is "
                             "not a local step): use client_eval=deployed")
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
        self._check_privacy(algorithm.family)
        self._check_secure_aggregation(algorithm)
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

    def _check_privacy(self, family: str) -> None:
        """DP-FedAvg's guarantee holds for the uniform clipped mean of an averaging server;
        refuse what would void it, and a budget that round 1 alone exceeds."""
        dp = self.dp
        if not dp.enabled:
            return
        if family != "averaging":
            averaging = sorted(n for n, a in load_all().items() if a.family == "averaging")
            raise ValueError(f"dp (DP-FedAvg) applies to the averaging family "
                             f"({', '.join(averaging)}); algorithm '{self.algorithm}' is "
                             f"{family}")
        if self.aggregation.rule != "mean":
            raise ValueError(f"dp replaces the mean by DP-FedAvg's clipped noised mean; "
                             f"aggregation.rule={self.aggregation.rule} has no bounded "
                             "sensitivity to noise: use aggregation.rule=mean")
        if dp.clipping == "adaptive" and dp.where == "client":
            raise ValueError("dp.clipping=adaptive needs the server to count the clipped "
                             "updates, which dp.where=client never shows it: use "
                             "dp.clipping=fixed")
        sampled = clients_per_round(self.client_fraction, self.num_clients)
        update_noise_multiplier(dp, sampled)
        budget = self.privacy.budget_epsilon
        nominal = [dp_release(dp, sampled, self.num_clients)]
        if budget is not None:
            why = budget_exceeded([], nominal, 1, budget, dp.delta, self.privacy.accountant)
            if why is not None:
                raise ValueError(f"{why}: raise the budget or dp.noise_multiplier")

    def _check_secure_aggregation(self, algorithm: Algorithm) -> None:
        """SecAgg+ shows the server only the weighted mean of the updates, or the sum of a
        payload: refuse what needs each client's own reply, and numbers no round (nor a summed
        setup exchange over every client) could run with."""
        if not self.secure_aggregation.enabled:
            return
        why = _needs_each_reply(self, algorithm)
        if why is not None:
            raise ValueError(f"secure_aggregation shows the server only sums over the "
                             f"clients' replies; {why}")
        check_secure_aggregation(self.secure_aggregation,
                                 clients_per_round(self.client_fraction, self.num_clients))
        if issubclass(algorithm.server, SumsSetup):
            check_secure_aggregation(self.secure_aggregation, self.num_clients,
                                     "of the setup exchange (num_clients)")

    def _check_level(self) -> str:
        """The run's task level: the dataset's own unless ``level`` says edge on a node-level
        dataset (any other choice that differs from the dataset's is refused)."""
        own = dataset_level(self.dataset)
        if self.level == "edge" and own != "node":
            raise ValueError(f"level=edge predicts the edges of a node-level dataset; dataset "
                             f"'{self.dataset}' is {own}-level")
        elif self.level not in (own, "edge"):
            raise ValueError(f"level={self.level} does not fit dataset '{self.dataset}', which "
                             f"is {own}-level (level=edge: link prediction on a node-level "
                             "dataset)")
        return self.level

    def _check_edge_level(self, level: str) -> None:
        """What applies only at the edge level, and what the edge level does not take: it
        trains each client's whole graph in one batch and scores each client's own edges."""
        if level != "edge":
            if self.model.decoder != "inner" or self.model.embedding is not None:
                raise ValueError("model.decoder and model.embedding shape a link predictor; "
                                 "they apply at level=edge only")
            if self.edges != EdgeOptions():
                raise ValueError("the edges section splits each client's edges; it applies at "
                                 "level=edge only")
            return
        if self.batch_size is not None:
            raise ValueError("level=edge trains each client's whole graph in one batch (its "
                             "training edges and their negatives); leave batch_size unset")
        if self.sampling != SamplingOptions():
            raise ValueError("the sampling section samples node neighbourhoods or subsets; "
                             "level=edge trains and scores on each client's whole graph")
        if self.partition.has_global_test:
            raise ValueError("level=edge scores each client's own test edges; leave "
                             "partition.global_test unset")
        if self.edges.loss == "full" and self.model.decoder != "inner":
            raise ValueError("edges.loss=full scores every node pair as GAE does, by the inner "
                             "decoder's Z Zᵀ; use model.decoder=inner")

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
        """Every option as plain data, the algorithm's own section in full (its defaults too):
        what a run directory's ``config.yaml`` records."""
        data = self.model_dump(mode="json", exclude={"methods"})
        if data["level"] == dataset_level(self.dataset):
            del data["level"]  # the dataset's own, left to it (a changed dataset brings its own)
        data.update({k: v.model_dump(mode="json") for k, v in self.methods.items()})
        return data


def _needs_each_reply(config: ExperimentConfig, algorithm: Algorithm) -> str | None:
    """Why ``algorithm`` under ``config`` needs each client's reply (None: its server's
    aggregate is FedAvg's weighted mean of the updates, with what ``DeliveringServer`` adds,
    or needs only sums of the replies, and any setup exchange it has is summed too)."""
    server = algorithm.server
    if issubclass(server, SumsFit):
        owner = next(c for c in server.__mro__ if "aggregate_fit_sum" in vars(c))
        own = [f"{server.__name__}.{hook}" for hook in ("configure_fit", "aggregate_fit")
               if getattr(server, hook) is not getattr(owner, hook)]
        if own:
            return (f"algorithm '{algorithm.name}' combines its replies its own way "
                    f"({', '.join(own)}), not as the sums {owner.__name__} takes")
    elif algorithm.family != "averaging":
        return (f"algorithm '{algorithm.name}' is {algorithm.family}: its server uses each "
                "client's reply (personal or clustered models, rewards)")
    else:
        own = [f"{server.__name__}.{hook}" for hook in SECURE_HOOKS
               if not issubclass(server, FedAvgServer)
               or getattr(server, hook) not in (getattr(FedAvgServer, hook),
                                                getattr(DeliveringServer, hook))]
        if own:
            return (f"algorithm '{algorithm.name}' combines its replies its own way "
                    f"({', '.join(own)}), not as FedAvg's weighted mean")
    if server.configure_setup is not Server.configure_setup and not issubclass(server,
                                                                               SumsSetup):
        return (f"algorithm '{algorithm.name}' sends its server each client's own setup "
                f"reply ({server.__name__}.configure_setup), which no sum replaces")
    if config.aggregation.rule != "mean":
        return (f"aggregation.rule={config.aggregation.rule} needs each client's update: use "
                "aggregation.rule=mean")
    if config.dp.enabled and config.dp.where == "server":
        return ("dp.where=server clips each client's update at the server, which never sees "
                "one: use dp.where=client")
    return None


def choose_engine(config: ExperimentConfig, algorithm: Algorithm) -> tuple[Engine, str | None]:
    """The engine ``config`` trains on, and why it is sequential unless asked to be (None:
    batched, or ``engine=sequential``). ``batched`` takes the batched engine wherever the
    runtime and the algorithm serve it (a client it cannot batch then trains alone); ``auto``
    also stays sequential where the model or the run would leave every client alone."""
    if config.engine == "sequential":
        return "sequential", None
    why = next(_batch_obstacles(config, algorithm, config.engine == "auto"), None)
    return ("batched", None) if why is None else ("sequential", why)


def _batch_obstacles(config: ExperimentConfig, algorithm: Algorithm, auto: bool
                     ) -> Iterator[str]:
    if config.runtime != "simulation":
        yield f"runtime={config.runtime} trains each client on its own"
    if not algorithm.batched:
        yield f"algorithm '{algorithm.name}' is not registered batched"
    if not auto:
        return
    if config.model.name == "gat":
        yield "the batched engine does not serve gat (its attention dropout draws from the " \
            "global RNG)"
    if config.sampling.fanouts or config.sampling.train_fraction < 1.0:
        yield "its clients train on sampled neighbourhoods or node subsets"
    if config.optimizer.persistent:
        yield "its clients keep their optimizer state across rounds (optimizer.persistent)"
    if config.edges.loss == "full":
        yield "its clients score every node pair (edges.loss=full), which the stacked pass " \
            "does not"


def _is_algorithm(name: str) -> bool:
    """Whether a top-level key names an algorithm (its option section)."""
    try:
        get_algorithm(name)
    except GraphfedError:
        return False
    return True


def _dataset_level(dataset: Any) -> str:
    """The level of ``dataset`` (node where it is unknown: the dataset's own check says so)."""
    try:
        return dataset_level(str(dataset))
    except GraphfedError:
        return "node"


def _default_partition(dataset: Any) -> str:
    return "louvain" if _dataset_level(dataset) == "node" else "dirichlet"


def _section_class(loc: tuple) -> type[BaseModel] | None:
    """The options class a config path points into, to list its valid keys."""
    head = loc[0] if loc else None
    if head == "partition" and len(loc) > 1:
        return PARTITIONS.get(loc[1])
    sections: dict[str, type[BaseModel]] = {
        "model": ModelOptions, "optimizer": OptimizerOptions, "csbm": CSBMOptions,
        "flower": FlowerOptions, "aggregation": AggregationOptions, "attack": AttackOptions,
        "log": LogOptions, "dp": DPOptions, "privacy": PrivacyOptions, "edges": EdgeOptions,
        "secure_aggregation": SecureAggregationOptions}
    if head in sections:
        return sections[head]
    if isinstance(head, str) and _is_algorithm(head):
        return get_algorithm(head).options
    return None


def _format_errors(error: ValidationError, prefix: tuple = ()) -> str:
    return format_errors(error, prefix, _section_class, PARTITIONS)


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
        apply_override(data, key, value, PARTITIONS)
    return build_config(data)


def load_config(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()
                ) -> ExperimentConfig:
    """Read a YAML config (or start from defaults) and apply ``key=value`` overrides."""
    return build_config(read_config(path, overrides, PARTITIONS))
