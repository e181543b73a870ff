"""Partitions that only assign items to clients (community, METIS, label-skew and chunk
splits); the global test cut and each client's ratios are the usual path's."""

from __future__ import annotations

from typing import ClassVar, Literal

import numpy as np
import torch
from pydantic import Field

from graphfed.data.partition.base import CLASSES, RatioPartition
from graphfed.data.partition.graph import gcfl_chunk_split
from graphfed.data.partition.label_skew import dirichlet_split, uniform_split
from graphfed.data.partition.node import louvain_split, major_labels_split, metis_split
from graphfed.data.partition.regression import quantile_bins
from graphfed.errors import GraphfedError


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
    tasks: ClassVar[tuple[str, ...]] = CLASSES
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


DEFAULT_BINS = 5  # a real target's quantile bins where ``bins`` is unset: quintiles


class DirichletPartition(RatioPartition):
    dumped_when_set: ClassVar[tuple[str, ...]] = ("published_split", "bins")
    name: Literal["dirichlet"] = "dirichlet"
    alpha: float = Field(0.5, gt=0.0)
    min_size: int = Field(10, ge=1)
    bins: int | None = Field(
        None, ge=2, description="a regression dataset's real-valued target: the number of "
        f"target-quantile bins that act as its labels (unset: {DEFAULT_BINS}); class labels "
        "take none")

    def assign(self, labels, graph, num_clients, seed):
        return dirichlet_split(self._classes(labels), num_clients, self.alpha,
                               np.random.default_rng(seed), self.min_size)

    def _classes(self, labels: torch.Tensor) -> torch.Tensor:
        """What the Dirichlet draw deals by: the class labels, or a real target's quantile
        bins."""
        if not labels.is_floating_point():
            if self.bins is not None:
                raise GraphfedError("partition.bins applies to a regression dataset's real "
                                    "targets; leave it unset for class labels")
            return labels
        return quantile_bins(labels, self.bins or DEFAULT_BINS)


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
