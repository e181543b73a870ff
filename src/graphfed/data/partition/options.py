"""Partition options (validated) and the one entry point that turns a description into them.

A partition is described entirely by its options, the dataset and the number of clients; the same
description always gives the same clients.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal

import numpy as np
import torch
from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    TypeAdapter,
    field_validator,
    model_validator,
)
from torch_geometric.data import Data

from graphfed.data.partition.fedego import label_skew_plan, louvain_plan
from graphfed.data.partition.fedspray import (
    default_folder,
    fedspray_plan,
    file_prefix,
    files_digest,
    read_client_files,
)
from graphfed.data.partition.gpfl import gpfl_split, gpfl_toy_split
from graphfed.data.partition.graph import gcfl_chunk_split, gcfl_code_split
from graphfed.data.partition.label_skew import dirichlet_split, uniform_split
from graphfed.data.partition.node import louvain_split, major_labels_split, metis_split
from graphfed.data.partition.overlap import PoolDraw, group_coefficients, overlap_plan
from graphfed.data.partition.plan import SplitPlan
from graphfed.errors import GraphfedError
from graphfed.validation import OPTIONS, Seed


def _split_sums_to_one(v: tuple[float, float, float]) -> tuple[float, float, float]:
    if any(r < 0 for r in v) or abs(sum(v) - 1.0) > 1e-6:
        raise ValueError(f"train/val/test ratios must be non-negative and sum to 1, got {v}")
    if v[0] == 0:  # every client's loss would be a mean over no items: NaN in round 1
        raise ValueError(f"the training share (first ratio) must be positive, got {v}")
    return v


SplitRatios = Annotated[tuple[float, float, float], AfterValidator(_split_sums_to_one)]


class PartitionBase(BaseModel):
    """Options every partition shares: a global test set, the seed, perturbation."""

    model_config = OPTIONS
    levels: ClassVar[tuple[str, ...]] = ("node", "graph")
    own_global_test: ClassVar[str | None] = None  # where a plan takes its global test from
    no_global_test: ClassVar[str | None] = None  # why a plan keeps no global test at all

    global_test: float = Field(
        0.0, ge=0.0, lt=1.0, description="fraction held out as a global test set")
    seed: Seed | None = Field(None, description="partition seed; defaults to the run's seed")
    edge_flip: float | list[float] | None = Field(
        None, description="graph level: fraction of each client's training-graph edges flipped "
        "(one value for all, or one per client)")

    @field_validator("global_test")
    @classmethod
    def _global_test_not_planned(cls, v: float) -> float:
        reason = cls.own_global_test or cls.no_global_test
        if v and reason:
            raise ValueError(f"{reason}; leave global_test unset")
        return v

    @field_validator("edge_flip")
    @classmethod
    def _flip_in_range(cls, v: float | list[float] | None) -> float | list[float] | None:
        values = v if isinstance(v, list) else [] if v is None else [v]
        if any(not 0.0 <= r <= 1.0 for r in values):
            raise ValueError(f"edge_flip ratios must lie in [0, 1], got {v}")
        return v

    @property
    def has_global_test(self) -> bool:
        return self.global_test > 0 or self.own_global_test is not None

    def input_digest(self, dataset: str) -> str | None:
        """A digest of what the plan reads besides its options and the dataset (files), part of
        the artifact's key so a changed input is not served from the cache; None: nothing."""
        return None

    def plan(self, graph: Data | None, labels: torch.Tensor, num_clients: int, seed: int,
             rng: np.random.Generator, dataset: str) -> SplitPlan:
        """The whole split (global test, clients, their local tests) of a partition that decides
        all of it itself (``graph``: node level only; ``labels``: of every node or graph;
        ``dataset``: its graphfed name);
        ``RatioPartition`` kinds are split by the usual path instead."""
        raise NotImplementedError


class RatioPartition(PartitionBase):
    """A partition that only assigns items to clients: the global test is a random cut first,
    and each client's items are split by the ``split`` ratios after."""

    split: SplitRatios = Field(
        (0.4, 0.3, 0.3), description="per-client train/val/test fractions (sum to 1)")

    def assign(self, labels: torch.Tensor, graph: Data | None, num_clients: int,
               seed: int) -> list[torch.Tensor]:
        """Client index sets over the items ``labels`` describes (``graph``: node level only)."""
        raise NotImplementedError


class LouvainPartition(RatioPartition):
    levels: ClassVar[tuple[str, ...]] = ("node",)
    name: Literal["louvain"] = "louvain"
    mode: Literal["pack", "largest"] = Field(
        "pack", description="pack communities into K similar-size clients, or keep the K largest")
    resolution: float = Field(1.0, gt=0)

    def assign(self, labels, graph, num_clients, seed):
        return louvain_split(graph, num_clients, self.mode, seed, self.resolution)


class MetisPartition(RatioPartition):
    levels: ClassVar[tuple[str, ...]] = ("node",)
    name: Literal["metis"] = "metis"
    refine_iterations: int = Field(
        10, ge=1, description="METIS's refinement passes (its niter); 1 is about three times "
        "faster on a million-node graph, at a slightly larger cut")

    def assign(self, labels, graph, num_clients, seed):
        return metis_split(graph, num_clients, seed, self.refine_iterations)


class MajorLabelsPartition(RatioPartition):
    levels: ClassVar[tuple[str, ...]] = ("node",)
    name: Literal["major_labels"] = "major_labels"
    labels: int = Field(3, ge=1, description="major labels per client")
    major_fraction: float = Field(0.8, ge=0.0, le=1.0)
    client_size: float | None = Field(
        None, gt=0.0, le=1.0, description="nodes per client as a fraction of the graph "
        "(default 1/num_clients)")
    overlap: bool = Field(False, description="clients sample the pool independently (FedEgo)")

    def assign(self, labels, graph, num_clients, seed):
        fraction = self.client_size or 1.0 / num_clients
        size = int(graph.num_nodes * fraction)
        return major_labels_split(labels, num_clients, self.labels, self.major_fraction, size,
                                  np.random.default_rng(seed), self.overlap)


class DirichletPartition(RatioPartition):
    name: Literal["dirichlet"] = "dirichlet"
    alpha: float = Field(0.5, gt=0.0)
    min_size: int = Field(10, ge=1)

    def assign(self, labels, graph, num_clients, seed):
        return dirichlet_split(labels, num_clients, self.alpha, np.random.default_rng(seed),
                               self.min_size)


class UniformPartition(RatioPartition):
    name: Literal["uniform"] = "uniform"

    def assign(self, labels, graph, num_clients, seed):
        return uniform_split(len(labels), num_clients, np.random.default_rng(seed))


class GCFLChunkPartition(RatioPartition):
    levels: ClassVar[tuple[str, ...]] = ("graph",)
    name: Literal["gcfl_chunk"] = "gcfl_chunk"
    chunk: int = Field(50, ge=1, description="consecutive graphs each client takes first")

    def assign(self, labels, graph, num_clients, seed):
        return gcfl_chunk_split(len(labels), num_clients, self.chunk,
                                np.random.default_rng(seed))


class GCFLCodePartition(PartitionBase):
    """FGFL's code split replayed exactly (``gcfl_code_split``): 80/10/10 inside each agent."""

    levels: ClassVar[tuple[str, ...]] = ("graph",)
    own_global_test: ClassVar[str | None] = (
        "gcfl_code takes the agents' validation graphs (10 %) as the global test set")
    name: Literal["gcfl_code"] = "gcfl_code"
    seed: Seed | None = Field(123, description="split seed; the code's 123 for every repeat")

    def plan(self, graph, labels, num_clients, seed, rng, dataset):
        return gcfl_code_split(len(labels), num_clients, seed)


class _GPFLFolds(PartitionBase):
    """What GPFL's splits share: per client a stratified ``folds``-fold split whose fold
    ``fold`` is the test set; no validation set and no global test set, as in the code."""

    levels: ClassVar[tuple[str, ...]] = ("graph",)
    folds: int = Field(5, ge=2, description="stratified folds per client")
    fold: int = Field(0, ge=0, description="the fold each client tests on (0 .. folds-1)")

    @model_validator(mode="after")
    def _no_global_test_and_fold_in_range(self) -> _GPFLFolds:
        if self.global_test:
            raise ValueError(f"{self.name} has no global test set (GPFL's code keeps none); "
                             "leave global_test unset")
        if self.fold >= self.folds:
            raise ValueError(f"fold {self.fold} does not exist with folds={self.folds}; "
                             f"choose 0 .. {self.folds - 1}")
        return self


class GPFLDirichletPartition(_GPFLFolds):
    """GPFL's split replayed (``gpfl_split``): equal-size clients with Dirichlet label priors
    capped at 0.95, then the per-client folds."""

    name: Literal["gpfl_dirichlet"] = "gpfl_dirichlet"
    alpha: float = Field(0.5, gt=0.0, description="Dirichlet concentration of the class priors")

    def plan(self, graph, labels, num_clients, seed, rng, dataset):
        return gpfl_split(labels, num_clients, self.alpha, self.folds, self.fold, seed)


class GPFLToyPartition(_GPFLFolds):
    """GPFL's Fig. 1 split (``gpfl_toy_split``): two groups of clients, alike within a group,
    as different across groups as ``rate`` makes them; binary labels only."""

    name: Literal["gpfl_toy"] = "gpfl_toy"
    rate: float = Field(0.5, ge=0.5, le=1.0, description="share of the class-0 graphs in group 0 "
                        "(0.5: homogeneous; towards 1: ever more heterogeneous groups)")

    def plan(self, graph, labels, num_clients, seed, rng, dataset):
        return gpfl_toy_split(labels, num_clients, self.rate, self.folds, self.fold, seed)


VAL_FIFTH = ("share of a client's nodes, just before its local test nodes, held out as validation "
             "(FedEgo: a fifth; never trained on or uploaded)")


class FedEgoLabelPartition(PartitionBase):
    """FedEgo's label skew; ``global_test`` is α_global, ``client_size`` α_local (its code's 0.5
    for Cora/CiteSeer), ``test_num`` the local test nodes per client."""

    levels: ClassVar[tuple[str, ...]] = ("node",)
    name: Literal["fedego_label"] = "fedego_label"
    global_test: float = Field(0.3, ge=0.0, lt=1.0)
    client_size: float = Field(0.5, gt=0.0, le=1.0, description="nodes per client / all nodes")
    labels: int = Field(3, ge=1, description="major labels per client")
    major_fraction: float = Field(0.8, ge=0.0, le=1.0)
    test_num: int = Field(200, ge=1, description="local test nodes per client")
    val_fraction: float = Field(0.2, ge=0.0, lt=1.0, description=VAL_FIFTH)

    def plan(self, graph, labels, num_clients, seed, rng, dataset):
        return label_skew_plan(graph, num_clients, self.global_test, self.client_size,
                               self.labels, self.major_fraction, self.test_num,
                               self.val_fraction, rng)


class FedEgoLouvainPartition(PartitionBase):
    """FedEgo's community split into N+1 parts, part 0 the global test graph."""

    levels: ClassVar[tuple[str, ...]] = ("node",)
    own_global_test: ClassVar[str | None] = (
        "fedego_louvain takes part 0 as the global test graph")
    name: Literal["fedego_louvain"] = "fedego_louvain"
    test_num: int = Field(200, ge=1, description="local test nodes per client")
    val_fraction: float = Field(0.2, ge=0.0, lt=1.0, description=VAL_FIFTH)
    delta: int = Field(20, ge=0, description="allowed part-size gap (its code's 20)")
    code_misalignment: bool = Field(
        False, description="split the graph FedEgo's code split: edges renumbered, features and "
        "labels not (labels decoupled from structure; its Tables 4-5 come from this)")

    def plan(self, graph, labels, num_clients, seed, rng, dataset):
        return louvain_plan(graph, num_clients, self.test_num, self.val_fraction, seed,
                            self.delta, self.code_misalignment)


class FedSprayPublishedPartition(PartitionBase):
    """FedSpray's published clients (``fedspray.fedspray_plan``): the authors' node list files,
    one per client (Louvain communities of the whole graph; nodes in no file belong to no client),
    with their seeded shuffles of the client order and of each client's nodes, and their split
    cut at ⌊0.4·n⌋ / ⌊0.7·n⌋."""

    levels: ClassVar[tuple[str, ...]] = ("node",)
    no_global_test: ClassVar[str | None] = (
        "fedspray_published has no global test set (FedSpray evaluates on each client's test "
        "nodes)")
    name: Literal["fedspray_published"] = "fedspray_published"
    files: Path | None = Field(
        None, description="folder of the client files <prefix>_<community>.txt (node ids, one "
        "a line); default <GRAPHFED_DATA>/partitions/FedSpray")
    prefix: str | None = Field(
        None, min_length=1, description="the files' name prefix; default the dataset's name in "
        "the authors' code (PyG's: Physics for Coauthor-Physics)")
    split: SplitRatios = Field(
        (0.4, 0.3, 0.3), description="per-client train/val/test fractions (the authors' 40/30/30)")

    def _source(self, dataset: str) -> tuple[Path, str]:
        """The folder and file name prefix this dataset's client files are read from."""
        folder = self.files if self.files is not None else default_folder()
        return folder, self.prefix or file_prefix(dataset)

    def input_digest(self, dataset):
        return files_digest(*self._source(dataset))

    def plan(self, graph, labels, num_clients, seed, rng, dataset):
        clients = read_client_files(*self._source(dataset), graph.num_nodes)
        return fedspray_plan(clients, num_clients, self.split, seed)


class OverlapGroup(BaseModel):
    """A share of the clients with its own overlap coefficient (FairGFL Sec. IV's none / low /
    high overlap study; Table III's row C is a group of coefficient 0)."""

    model_config = OPTIONS
    fraction: float = Field(gt=0.0, le=1.0, description="share of the clients in the group")
    coefficient: float = Field(ge=0.0, description="the group's overlap coefficient c")


DEFAULT_COEFFICIENT = 2.0


class FairGFLOverlapPartition(PartitionBase):
    """FairGFL's overlapping subgraphs (``overlap.overlap_plan``): a global test set and a public
    pool held out, a Dirichlet label-skew share of the rest to exactly one client each, and an
    overlapping pool clients draw from independently. Every client node is a training node.
    UNKNOWN-DEFAULT (the paper's values were stripped): test_fraction, overlap_ratio, alpha,
    coefficient (spec §4, §7.5 F5); public_fraction 5 % (§7.5 F14)."""

    levels: ClassVar[tuple[str, ...]] = ("node",)
    own_global_test: ClassVar[str | None] = (
        "fairgfl_overlap holds out partition.test_fraction as the global test set")
    name: Literal["fairgfl_overlap"] = "fairgfl_overlap"
    test_fraction: float = Field(0.2, gt=0.0, lt=1.0, description="global test nodes, held out "
                                 "first")
    public_fraction: float = Field(
        0.05, ge=0.0, lt=1.0, description="nodes the server holds for its public encoder: in no "
        "client and not in the global test set")
    overlap_ratio: float = Field(0.3, ge=0.0, le=1.0, description="share ρ_o of the remaining "
                                 "nodes that form the overlapping pool")
    alpha: float = Field(0.5, gt=0.0, description="Dirichlet concentration of the label skew "
                         "(non-overlapping nodes and pool shares alike)")
    coefficient: float | None = Field(
        None, ge=0.0, description="overlap coefficient c: each pool node is held by about c "
        f"clients on average ({DEFAULT_COEFFICIENT} unless overlap_groups give each group its "
        "own)")
    overlap_groups: list[OverlapGroup] | None = Field(
        None, min_length=1, description="clients in order split into groups, each with its own "
        "coefficient (instead of one coefficient); fractions sum to 1")
    pool_draw: PoolDraw = Field(
        "per_label", description="RECONSTRUCTED: per_label (q_ℓ ~ Dir(α) over clients, "
        "n_iℓ = c·|O_ℓ|·q_ℓi) or per_client (q_i ~ Dir(α) over labels, n_iℓ = c·|O|/N·q_iℓ)")

    @model_validator(mode="after")
    def _fractions_fit(self) -> FairGFLOverlapPartition:
        if self.test_fraction + self.public_fraction >= 1:
            raise ValueError(f"test_fraction {self.test_fraction} + public_fraction "
                             f"{self.public_fraction} leave no node for the clients; keep "
                             "their sum below 1")
        if self.overlap_groups is not None:
            total = sum(g.fraction for g in self.overlap_groups)
            if abs(total - 1.0) > 1e-6:
                raise ValueError(f"overlap_groups fractions must sum to 1, got {total:g}")
            if self.coefficient is not None:
                raise ValueError("set coefficient or overlap_groups, not both (each group has "
                                 "its own coefficient)")
        elif self.coefficient is None:  # resolved here, so the run's config.yaml records it
            self.coefficient = DEFAULT_COEFFICIENT
        return self

    def coefficients(self, num_clients: int) -> np.ndarray:
        """c_i of every client: its group's coefficient, or ``coefficient`` for all."""
        if self.overlap_groups is None:
            return np.full(num_clients, self.coefficient)
        return group_coefficients([(g.fraction, g.coefficient) for g in self.overlap_groups],
                                  num_clients)

    def plan(self, graph, labels, num_clients, seed, rng, dataset):
        return overlap_plan(graph, self.test_fraction, self.public_fraction, self.overlap_ratio,
                            self.alpha, self.coefficients(num_clients), self.pool_draw, rng)


PARTITIONS = {cls.model_fields["name"].default: cls for cls in (
    LouvainPartition, MetisPartition, MajorLabelsPartition, DirichletPartition, UniformPartition,
    GCFLChunkPartition, GCFLCodePartition, GPFLDirichletPartition, GPFLToyPartition,
    FedEgoLabelPartition, FedEgoLouvainPartition, FedSprayPublishedPartition,
    FairGFLOverlapPartition)}

PartitionOptions = Annotated[
    LouvainPartition | MetisPartition | MajorLabelsPartition | DirichletPartition
    | UniformPartition | GCFLChunkPartition | GCFLCodePartition | GPFLDirichletPartition
    | GPFLToyPartition | FedEgoLabelPartition | FedEgoLouvainPartition
    | FedSprayPublishedPartition | FairGFLOverlapPartition,
    Field(discriminator="name"),
]


def check_partition_level(options: PartitionBase, level: str) -> None:
    if level not in options.levels:
        valid = [n for n, c in PARTITIONS.items() if level in c.levels]
        raise GraphfedError(
            f"partition '{options.name}' is for {'/'.join(options.levels)}-level datasets; "
            f"for a {level}-level dataset use one of: {', '.join(valid)}")
    if options.edge_flip is not None and level != "graph":
        raise GraphfedError("partition.edge_flip applies to graph-level datasets only")


def check_flip_length(options: PartitionBase, num_clients: int) -> None:
    if isinstance(options.edge_flip, list) and len(options.edge_flip) != num_clients:
        raise GraphfedError(
            f"partition.edge_flip lists {len(options.edge_flip)} ratios for {num_clients} clients")


def parse_partition(data: dict | str) -> PartitionBase:
    """Validate a partition description (a name, or a dict with ``name``) into its options."""
    if isinstance(data, str):
        data = {"name": data}
    return TypeAdapter(PartitionOptions).validate_python(data)
