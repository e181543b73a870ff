"""Ego-graphs for FedEgo: clients train and evaluate on fixed-shape sampled ego-trees, upload
mashed (Mixup) ego-graphs, and the server trains on the union of the uploads."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from graphfed.algorithms.fedego.options import FedEgoOptions, split_params
from graphfed.data.sampling import NeighbourSampler
from graphfed.models.ego import FedEgoNet, mash, tree_size
from graphfed.regression import TargetScale
from graphfed.tensors import Params
from graphfed.training import PreparedClient
from graphfed.training.batches import ModelCall, PreparedNodeClient


class TreeBatch:
    """A batch of ego-trees; the loss is taken at the centres. ``x`` is either the trees'
    embeddings (trees, size, h) or distinct raw node features that ``positions`` index, the
    features of the client's nodes ``rows``."""

    def __init__(self, x: Tensor, targets: Tensor, positions: Tensor | None = None,
                 rows: Tensor | None = None):
        self.x, self.targets, self.positions, self.rows = x, targets, positions, rows

    def forward(self, model: nn.Module, call: ModelCall) -> Tensor:
        kwargs = {} if self.positions is None else {"positions": self.positions}
        return call(model, (self.x, None, None), kwargs)


class EgoView:
    """A client's graph seen through sampled ego-trees; it offers the ``batches``/``outputs``
    interface of a prepared client, so the ordinary ``Trainer`` trains and evaluates on it."""

    def __init__(self, data: PreparedNodeClient, options: FedEgoOptions):
        self.data, self.options = data, options
        self.sampler = NeighbourSampler(data.edge_index, len(data.y))
        self.size = tree_size(options.hops, options.fanout)

    @property
    def target_scale(self) -> TargetScale | None:
        """The underlying client's (None: FedEgo is node classification)."""
        return self.data.target_scale

    def num_samples(self, split: str) -> int:
        return self.data.num_samples(split)

    def labels(self, split: str) -> Tensor:
        return self.data.labels(split)

    @property
    def train_majority(self) -> int | None:
        return self.data.train_majority

    @property
    def evaluation_draws(self) -> bool:
        return self.options.eval_sampling != "full"

    def trees(self, centres: Tensor, targets: Tensor) -> TreeBatch:
        distinct, positions = self.sample(centres).unique(return_inverse=True)
        return TreeBatch(self.data.x[distinct], targets, positions, distinct)

    def sample(self, centres: Tensor) -> Tensor:
        """Aligned ego-trees of FedEgo's shape around ``centres``, (len(centres), size)."""
        return self.sampler.sample(centres, self.options.hops, self.options.fanout)

    def batches(self, split: str, batch_size: int | None, shuffle: bool
                ) -> Iterator[TreeBatch]:
        index = self.data.epoch_nodes(split, batch_size, shuffle)
        for chunk in index.split(batch_size or max(len(index), 1)):
            yield self.trees(chunk, self.data.y[chunk])

    def outputs(self, model: nn.Module, call: ModelCall, splits: Iterable[str]
                ) -> dict[str, tuple[Tensor, Tensor]]:
        if self.options.eval_sampling == "full":
            return self.data.outputs(model, call, splits)
        out = {}
        for s in splits:
            index = self.data.index[s]
            if len(index):
                out[s] = (self.trees(index, self.data.y[index]).forward(model, call),
                          self.data.y[index])
        return out


def ego_view(data: PreparedNodeClient, options: FedEgoOptions, cache: dict[str, Any],
             key: str = "ego_view") -> EgoView:
    """The client's view of ``data``, kept in its cache: the sampler's CSR depends on the graph
    only, so it is built once per process and rebuilt after a resume."""
    if key not in cache:
        cache[key] = EgoView(data, options)
    return cache[key]


def _tree_values(model: FedEgoNet, theta: Params, x: Tensor, positions: Tensor, labels: Tensor,
                 num_classes: int, options: FedEgoOptions,
                 reduced: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Aligned trees ``positions`` (b, size) over node rows ``x`` (labels ``labels``): their
    reduction embeddings r_v = Θ(x_v) (b, size, h) and one-hot labels (b, size, C); w/o EGO the
    centres' embeddings from the SAGE reduction and labels (b, 1, ·), no structure."""
    if options.ego:
        if reduced is None:
            reduced = F.relu(functional_call(model.reduction, theta, (x,)))
        return reduced[positions], F.one_hot(labels[positions], num_classes).float()
    values = functional_call(model.reduction, theta, (x[positions],)).unsqueeze(1)
    return values, F.one_hot(labels[positions[:, 0]], num_classes).float().unsqueeze(1)


def _mashed(values: Tensor, onehot: Tensor, options: FedEgoOptions) -> tuple[Tensor, Tensor]:
    """One upload from a batch of aligned trees: their mean at every position (Mixup, Eq. 8),
    or w/o Mixup the batch's first tree."""
    return (mash(values), mash(onehot)) if options.mixup else (values[0], onehot[0])


def _stacked(uploads: list[tuple[Tensor, Tensor]], options: FedEgoOptions
             ) -> tuple[Tensor, Tensor]:
    x, y = (torch.stack(t) for t in zip(*uploads, strict=True))
    if options.noise_sigma > 0:
        x = x + options.noise_sigma * torch.randn_like(x)
    return x, y


@torch.no_grad()
def mashed_ego_graphs(view: EgoView, model: FedEgoNet, theta: Params, num_classes: int,
                      batch_size: int, options: FedEgoOptions) -> tuple[Tensor, Tensor]:
    """The upload as FedEgo's code builds it: one mashed ego-graph per batch of all training
    centres, (M, size, h) embeddings and (M, size, C) soft labels, from the post-training Θ_i
    in eval mode."""
    data = view.data
    reduced = F.relu(functional_call(model.reduction, theta, (data.x,))) if options.ego else None
    index = data.index["train"]
    index = index[torch.randperm(len(index), device=index.device)]
    return _stacked([_mashed(*_tree_values(model, theta, data.x, view.sample(chunk), data.y,
                                           num_classes, options, reduced), options)
                     for chunk in index.split(batch_size)], options)


class TrainingBatchMasher:
    """The upload as the paper's Algorithm 1 (lines 5-12) builds it: a trainer hook that mashes
    every training batch of every epoch, with the Θ_i that batch is trained under."""

    def __init__(self, view: EgoView, model: FedEgoNet, num_classes: int,
                 options: FedEgoOptions) -> None:
        self.view, self.model, self.num_classes, self.options = view, model, num_classes, options
        self.uploads: list[tuple[Tensor, Tensor]] = []

    @torch.no_grad()
    def __call__(self, live: Params, batch: object) -> None:
        """The trainer's ``on_batch`` hook, called with each batch of an ``EgoView``."""
        assert isinstance(batch, TreeBatch) and batch.positions is not None  # a client's trees
        theta = split_params(live)[0]
        labels = self.view.data.y[batch.rows]
        self.uploads.append(_mashed(*_tree_values(self.model, theta, batch.x, batch.positions,
                                                  labels, self.num_classes, self.options),
                                    self.options))

    def result(self) -> tuple[Tensor, Tensor]:
        return _stacked(self.uploads, self.options)


def as_prepared(data: EgoView | MashedData) -> PreparedClient:
    """``data`` where the trainer takes a prepared client: an ego view and the mashed set read
    as one (sizes, labels, batches, outputs) without being one."""
    return cast("PreparedClient", data)


def label_distribution(y: Tensor, num_classes: int) -> Tensor:
    return torch.bincount(y, minlength=num_classes).float() / max(len(y), 1)


class MashedData:
    """The server's training set of one round: every uploaded mashed ego-graph, each its own
    block; an epoch trains on a random ``fraction`` of the centres."""

    def __init__(self, x: Tensor, y: Tensor, options: FedEgoOptions):
        self.x, self.y, self.options = x, y, options
        self.size = x.shape[1]

    def batches(self, split: str, batch_size: int | None, shuffle: bool
                ) -> Iterator[TreeBatch]:
        count = len(self.x)
        keep = max(1, int(count * self.options.server_fraction))
        chosen = torch.randperm(count, device=self.x.device)[:keep]
        for chunk in chosen.split(batch_size or len(chosen)):
            trees = self.x[chunk]
            if self.options.server_resample:
                rows = torch.arange(len(chunk), device=trees.device).unsqueeze(1)
                trees = trees[rows, resampled_positions(len(chunk), self.options, trees.device)]
            yield TreeBatch(trees, self.y[chunk, 0])


def resampled_positions(num_trees: int, options: FedEgoOptions,
                        device: torch.device | None = None) -> Tensor:
    """FedEgo's code re-samples a mashed tree on the server (``fanout`` children drawn with
    replacement among the ``fanout`` children, level by level): position j of the new tree
    reads position ``orig[j]`` of the uploaded one."""
    f = options.fanout
    levels = [torch.zeros(num_trees, 1, dtype=torch.long, device=device)]
    for _ in range(options.hops):
        parents = levels[-1].repeat_interleave(f, dim=1)
        draw = torch.randint(0, f, parents.shape, device=device)
        levels.append(f * parents + 1 + draw)
    return torch.cat(levels, dim=1)
