"""Partitions that replay a paper's whole split (global test, clients, their local tests) by
their own ``plan``: GCFL's and FGFL's code split, GPFL's folds, FedEgo's, FedSpray's published
clients and FairGFL's overlapping subgraphs (the field's benchmark protocols are in
``protocol_options``)."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Literal

import numpy as np
from pydantic import BaseModel, Field, model_validator

from graphfed.data.datasets import molecule_smiles
from graphfed.data.partition.base import CLASSES, PartitionBase, SplitRatios
from graphfed.data.partition.fedego import label_skew_plan, louvain_plan
from graphfed.data.partition.fedspray import (
    default_folder,
    fedspray_plan,
    file_prefix,
    files_digest,
    read_client_files,
)
from graphfed.data.partition.gpfl import gpfl_split, gpfl_toy_split
from graphfed.data.partition.graph import gcfl_code_split
from graphfed.data.partition.overlap import PoolDraw, group_coefficients, overlap_plan
from graphfed.data.partition.regression import scaffold_plan
from graphfed.validation import OPTIONS, Seed


class GCFLCodePartition(PartitionBase):
    """FGFL's code split replayed exactly (``gcfl_code_split``): 80/10/10 inside each agent."""

    levels: ClassVar[tuple[str, ...]] = ("graph",)
    own_global_test: ClassVar[str | None] = (
        "gcfl_code takes the agents' validation graphs (10 %) as the global test set")
    name: Literal["gcfl_code"] = "gcfl_code"
    seed: Seed | None = Field(123, description="split seed; the code's 123 for every repeat")

    def plan(self, graph, labels, num_clients, seed, rng, dataset):
        return gcfl_code_split(len(labels), num_clients, seed)


class ScaffoldPartition(PartitionBase):
    """Scaffold clients of a molecular dataset (``regression.scaffold_plan``): each
    Bemis–Murcko scaffold in one client, largest groups first to the smallest client, and
    scaffold-disjoint train/val/test splits inside each client."""

    levels: ClassVar[tuple[str, ...]] = ("graph",)
    no_global_test: ClassVar[str | None] = (
        "scaffold clients hold every molecule, each client testing on scaffolds of its own")
    name: Literal["scaffold"] = "scaffold"
    split: SplitRatios = Field(
        (0.8, 0.1, 0.1), description="per-client train/val/test shares, filled by whole "
        "scaffold groups, largest first")

    def plan(self, graph, labels, num_clients, seed, rng, dataset):
        return scaffold_plan(molecule_smiles(dataset), num_clients, self.split)


class _GPFLFolds(PartitionBase):
    """What GPFL's splits share: per client a stratified ``folds``-fold split whose fold
    ``fold`` is the test set; no validation set and no global test set, as in the code."""

    levels: ClassVar[tuple[str, ...]] = ("graph",)
    tasks: ClassVar[tuple[str, ...]] = CLASSES  # class priors, stratified folds
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
    tasks: ClassVar[tuple[str, ...]] = CLASSES
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
    tasks: ClassVar[tuple[str, ...]] = CLASSES
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

