"""The field's standard protocols' partitions: a benchmark's whole subgraph split (its clients and
each client's train/val/test nodes) as that benchmark's code builds it: FED-PUB's METIS splits
and OpenFGL's Louvain and METIS splits. Each may take its nodes' roles from a dataset's
published split instead (``PublishedSplitOption``)."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field
from torch_geometric.data import Data

from graphfed.data.partition.base import CLASSES, PublishedSplitOption, SplitRatios
from graphfed.data.partition.fedpub import fedpub_plan
from graphfed.data.partition.node import metis_split
from graphfed.data.partition.openfgl import DELTA, default_split, louvain_clients, openfgl_plan
from graphfed.data.partition.plan import SplitPlan


class _OpenFGLPartition(PublishedSplitOption):
    """What OpenFGL's two subgraph splits share (``openfgl.openfgl_plan``): its clients, each
    split class by class with OpenFGL's shares; no global test set."""

    levels: ClassVar[tuple[str, ...]] = ("node",)
    tasks: ClassVar[tuple[str, ...]] = CLASSES
    no_global_test: ClassVar[str | None] = (
        "OpenFGL's protocol has no global test set (each client is scored on its own nodes)")
    split: SplitRatios | None = Field(
        None, description="per-client train/val/test shares, cut class by class; default "
        "OpenFGL's for the dataset (0.2/0.4/0.4 on Cora, CiteSeer, PubMed, the Amazon and "
        "Coauthor sets; 0.5/0.25/0.25 on Tolokers, Actor, Minesweeper)")

    def clients(self, graph: Data, num_clients: int, seed: int) -> list[torch.Tensor]:
        """The node ids of every client."""
        raise NotImplementedError

    def plan(self, graph: Data, labels: torch.Tensor, num_clients: int, seed: int,
             rng: np.random.Generator, dataset: str) -> SplitPlan:
        return openfgl_plan(labels, self.clients(graph, num_clients, seed),
                            self.split or default_split(dataset), rng)


class OpenFGLLouvainPartition(_OpenFGLPartition):
    """OpenFGL's ``subgraph_fl_louvain``: Louvain communities cut to at most N // K - δ nodes,
    dealt to K clients of about N // K nodes (``openfgl.louvain_clients``)."""

    name: Literal["openfgl_louvain"] = "openfgl_louvain"
    delta: int = Field(DELTA, ge=0, description="OpenFGL's louvain_delta: communities are cut "
                       "to at most N // K - delta nodes, a client takes a piece while it stays "
                       "below N // K + delta")
    resolution: float = Field(1.0, gt=0, description="Louvain resolution (OpenFGL's "
                              "louvain_resolution)")

    def clients(self, graph, num_clients, seed):
        return louvain_clients(graph, num_clients, self.delta, self.resolution, seed)


class OpenFGLMetisPartition(_OpenFGLPartition):
    """OpenFGL's ``subgraph_fl_metis``: METIS into K parts, one a client."""

    name: Literal["openfgl_metis"] = "openfgl_metis"

    def clients(self, graph, num_clients, seed):
        return metis_split(graph, num_clients, seed)

class FedPubDisjointPartition(PublishedSplitOption):
    """FED-PUB's disjoint split (``fedpub.fedpub_plan``): its largest connected component cut by
    METIS into K clients, every node's split drawn once, 20/40/40 train/test/validation in
    expectation (or, with ``published_split``, the dataset's published masks on the same
    clients); no global test set."""

    levels: ClassVar[tuple[str, ...]] = ("node",)
    no_global_test: ClassVar[str | None] = (
        "FED-PUB's protocol has no global test set (each client is scored on its own nodes)")
    overlapping: ClassVar[bool] = False
    name: Literal["fedpub_disjoint"] = "fedpub_disjoint"
    train: float = Field(0.2, gt=0.0, lt=1.0, description="share of the nodes that train "
                         "(FED-PUB's ratio_train 0.2; 0.05 on ogbn-arxiv); the rest is split "
                         "evenly into test and validation")

    def plan(self, graph, labels, num_clients, seed, rng, dataset):
        return fedpub_plan(graph, num_clients, self.train, self.overlapping, seed, rng,
                           roles_kept=self.published_split is None)


class FedPubOverlappingPartition(FedPubDisjointPartition):
    """FED-PUB's overlapping split: METIS into K/5 communities, five clients per community, each
    a random half of its community's nodes (clients of one community share nodes)."""

    overlapping: ClassVar[bool] = True
    name: Literal["fedpub_overlapping"] = "fedpub_overlapping"  # type: ignore[assignment]
