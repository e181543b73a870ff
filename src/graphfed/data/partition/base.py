"""What every partition's options share: the validated global test, seed and edge flips, and the
two ways a partition splits (``RatioPartition`` assigns items and the ratios cut each client;
otherwise the partition's ``plan`` decides the whole split). A partition that may take its nodes'
train/val/test roles from a dataset's published split derives from ``PublishedSplitOption``."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, ClassVar

import numpy as np
import torch
from pydantic import (
    AfterValidator,
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from torch import Tensor
from torch_geometric.data import Data

from graphfed.data.partition.plan import TEST, TRAIN, UNSPLIT, VAL, SplitPlan
from graphfed.errors import GraphfedError
from graphfed.regression import TASKS
from graphfed.validation import OPTIONS, Seed

CLASSES: tuple[str, ...] = ("classification",)  # the ``tasks`` of a kind that reads classes


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
    # the targets it can split (``graphfed.regression``): a kind that deals, stratifies or skews
    # by class labels is for classification only; one that never reads a target, for any
    tasks: ClassVar[tuple[str, ...]] = TASKS
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


class PublishedSplitOption(PartitionBase):
    """A partition whose clients' nodes may take their train/val/test roles from one of the
    dataset's published splits (the heterophilous sets publish ten) instead of its own random
    draw, so a federated result is comparable with the centralised ones on the same masks."""

    # options dumped only when set, so that the partitions that leave them unset keep the
    # artifact ids and run fingerprints they had before the options existed
    dumped_when_set: ClassVar[tuple[str, ...]] = ("published_split",)

    published_split: int | None = Field(
        None, ge=0, description="take every node's train/val/test role from the dataset's "
        "published split number i (0 .. 9 on the heterophilous sets) instead of the random draw "
        "(whose ratios are then unused); a node in none of its masks is in no split")

    @model_validator(mode="after")
    def _published_split_without_global_test(self) -> PublishedSplitOption:
        if self.published_split is not None and self.global_test:
            raise ValueError("published_split gives every node its role from the dataset's "
                             "masks; leave global_test unset")
        return self

    @model_serializer(mode="wrap")
    def _dump_published_split_only_when_set(
            self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """``dumped_when_set`` left out while unset, so every partition without them keeps the
        artifact id and run fingerprint it had before the options existed (cached splits and
        checkpoints stay valid)."""
        dumped = handler(self)
        for name in self.dumped_when_set:
            if getattr(self, name) is None:
                dumped.pop(name, None)
        return dumped

    def published_roles(self, plan: SplitPlan, dataset: str, level: str,
                        splits: tuple[Tensor, Tensor, Tensor] | None) -> SplitPlan:
        """``plan`` with every client node's role read from published split ``published_split``
        (``splits``: the dataset's train/val/test masks, N x splits); ``plan`` itself while
        the option is unset."""
        index = self.published_split
        if index is None:
            return plan
        where = f"partition.published_split={index}"
        if level != "node":
            raise GraphfedError(f"{where}: {dataset} is a graph-level dataset; published splits "
                                "are node masks of node-level datasets")
        if splits is None:
            raise GraphfedError(f"{where}: {dataset} publishes no train/val/test splits (the "
                                "heterophilous sets do); leave published_split unset")
        count = splits[0].size(1)
        if index >= count:
            raise GraphfedError(f"{where}: {dataset} publishes {count} splits, numbered "
                                f"0 .. {count - 1}")
        roles = torch.full((splits[0].size(0),), UNSPLIT, dtype=torch.long)
        for code, masks in zip((TRAIN, VAL, TEST), splits, strict=True):
            roles[masks[:, index]] = code
        client_splits = [roles[ids] for ids in plan.client_ids]
        untrained = [k for k, codes in enumerate(client_splits) if not (codes == TRAIN).any()]
        if untrained:
            raise GraphfedError(f"{where}: client {untrained[0]} holds no training node of "
                                f"{dataset}'s split {index}; use fewer clients")
        return dataclasses.replace(plan, client_splits=client_splits)


class RatioPartition(PublishedSplitOption):
    """A partition that only assigns items to clients: the global test is a random cut first,
    and each client's items are split by the ``split`` ratios after."""

    split: SplitRatios = Field(
        (0.4, 0.3, 0.3), description="per-client train/val/test fractions (sum to 1)")

    def assign(self, labels: torch.Tensor, graph: Data | None, num_clients: int,
               seed: int) -> list[torch.Tensor]:
        """Client index sets over the items ``labels`` describes (``graph``: node level only)."""
        raise NotImplementedError
