"""Many clients' local steps trained together: the batched engine.

The clients' parameters are stacked (``[K, ...]``) and one ``torch.func.vmap`` over
``functional_call`` runs every client's forward pass at once, on its own parameters and its own
data, zero-padded to the largest client of its group (``training.padded``; clients of similar
size grouped by ``training.grouping``); one backward pass gives each client its own gradient,
since the objective is the sum of the clients' own losses (``training.stacked_losses``);
``StackedOptimizer`` applies each client's Adam or SGD update. Clients with fewer mini-batches
than their neighbours are masked out of the steps they do not have. Graph-level clients on the
CPU are joined instead of padded (``training.joined``), all in one step, in passes of about
``stacked_losses.PASS_ROWS`` nodes. Edge-level clients run their encoder over their padded
training graph and their decoder on their own pairs, padded too (``padded.EdgeLayout``).

Randomness is per client: its shuffling comes from a generator seeded with its own call seed,
an edge client's training negatives from the global RNGs seeded with it as its sequential fit
seeds them (``_edge_epochs``), and its dropout masks from that seed through
``models.dropout.keyed``, so what a client draws does not depend on who trains beside it. With
dropout off a client's result equals the sequential ``Trainer.train`` (same shuffles and
negatives, same arithmetic up to summation order).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from graphfed.seeding import preserved_rngs, seed_all
from graphfed.tensors import Params
from graphfed.training import replay
from graphfed.training.batches import (
    AnyBatch,
    EdgeBatch,
    GraphBatch,
    NodeBatch,
    PreparedClient,
    PreparedEdgeClient,
    PreparedGraphClient,
    PreparedNodeClient,
)
from graphfed.training.grouping import by_size_group, step_size
from graphfed.training.joined import joins
from graphfed.training.padded import Cache, EdgeLayout, NodeLayout, edge_layout, node_layout
from graphfed.training.stacked_losses import (
    graph_losses,
    joined_backward,
    node_losses,
    pair_losses,
)
from graphfed.training.stacked_optim import StackedOptimizer
from graphfed.training.step import LocalStep, linear_penalty, proximal_penalty
from graphfed.training.trainer import Trainer, TrainStats


@dataclass
class ClientJob:
    """One client's step, its data and its call seed (its shuffling and dropout stream)."""

    step: LocalStep
    data: PreparedClient
    seed: int


def batch_refusal(trainer: Trainer, data: PreparedClient) -> str | None:
    """Why this client's standard step cannot join a batch (None: it can)."""
    opts = getattr(trainer.model, "opts", None)
    if opts is None:
        return f"{type(trainer.model).__name__} is not one of graphfed's GNN backbones"
    if trainer.optimizer.persistent:
        return "its optimizer state persists across rounds"
    if opts.name == "gat":  # and its attention dropout draws from the global RNG
        return "GAT's layers drop self-loops by a boolean mask, which vmap does not batch"
    if isinstance(data, PreparedNodeClient) and (
            data.sampler is not None or data.sampling.train_fraction < 1.0):
        return "it trains on sampled neighbourhoods or node subsets"
    if isinstance(data, PreparedEdgeClient) and data.adjacency is not None:
        return "it scores every node pair (edges.loss=full), which the stacked pass does not"
    return None


def train_together(trainer: Trainer, jobs: list[ClientJob], epochs: int,
                   batch_size: int | None, cache: Cache | None = None,
                   joined: bool | None = None, record: bool = False
                   ) -> list[tuple[Params, TrainStats]]:
    """Each job's ``LocalStep`` for ``epochs``, as ``Trainer.train`` returns it (the trained
    parameters, views of one stack, and ``TrainStats``); a client's result does not depend on
    who trains beside it. Graph-level clients in the joined layout (``joined``; None: wherever
    ``joined.joins`` says it serves) train all in one pass per step, unpadded; otherwise
    clients train in padded groups of similar size, one pass per group and step
    (``grouping.by_size_group``). ``cache`` keeps each group's padded node layout between calls.
    ``record``: a group trained on whole graphs (node level, full batch) is recorded once
    and replayed where ``replay.available`` says the device can (``_train_replayed``)."""
    graph_level = isinstance(jobs[0].data, PreparedGraphClient)
    if joined is None:
        joined = graph_level and joins(trainer.model, trainer.device)
    if joined and not graph_level:
        raise ValueError("the joined layout trains graph-level clients only")
    if joined:
        return _train_group(trainer, jobs, epochs, batch_size, None, joined=True)
    return by_size_group(trainer, [j.data for j in jobs],
                         [step_size(j.data, batch_size) for j in jobs], cache,
                         lambda members, group_cache: _train_group(
                             trainer, [jobs[k] for k in members], epochs, batch_size,
                             group_cache, record=record))


def _train_group(trainer: Trainer, jobs: list[ClientJob], epochs: int,
                 batch_size: int | None, cache: Cache | None, joined: bool = False,
                 record: bool = False) -> list[tuple[Params, TrainStats]]:
    """``train_together`` for one group: all its clients in one stacked pass per step (the
    clients of one level, as the first one: their batches are all ``NodeBatch``, all
    ``GraphBatch`` or all ``EdgeBatch``)."""
    model, device, clients = trainer.model, trainer.device, len(jobs)
    data = [j.data for j in jobs]
    layout: NodeLayout | EdgeLayout | None = None
    if isinstance(data[0], PreparedNodeClient):
        layout = node_layout(cast(list[PreparedNodeClient], data), cache)
    elif isinstance(data[0], PreparedEdgeClient):
        layout = edge_layout(cast(list[PreparedEdgeClient], data), cache)
    whole = batch_size is None or batch_size >= max(d.num_samples("train") for d in data)
    if (record and isinstance(layout, NodeLayout) and whole and cache is not None
            and replay.available(device)):
        return _train_replayed(trainer, jobs, epochs, layout, cache)
    live = {name: torch.stack([j.step.params[name] for j in jobs]).requires_grad_(True)
            for name in jobs[0].step.params}
    penalties = _Penalties(live, device, *_Penalties.kinds(jobs))
    penalties.load(jobs)
    optimizer = StackedOptimizer(trainer.optimizer, live, clients)
    keys = _keys(jobs, device)
    generators = [torch.Generator().manual_seed(j.seed) for j in jobs]
    drawn = _edge_epochs(jobs, epochs) if isinstance(layout, EdgeLayout) else None
    total = torch.zeros(clients, device=device)
    samples = torch.zeros(clients, dtype=torch.long, device=device)
    steps = [0] * clients  # counted on the host, where the batches are chosen
    model.train()
    step = 0
    for e in range(epochs):
        # each client's own epoch of batches, shuffled by its own generator (drawn already)
        epoch: list[Iterator[AnyBatch]] = (
            [iter(d[e]) for d in drawn] if drawn is not None else
            [iter(j.data.batches("train", batch_size, True, g))
             for j, g in zip(jobs, generators, strict=True)])
        while True:
            chosen = [next(batches, None) for batches in epoch]
            if all(b is None for b in chosen):
                break
            active = None if all(b is not None for b in chosen) else torch.tensor(
                [b is not None for b in chosen], device=device)
            weight = None if active is None else active.float()  # None: every client steps
            terms = []  # per client, still to be backpropagated
            if joined:  # the losses' gradients are in the stacks already
                loss, counts = joined_backward(model, live, keys, step,
                                               cast(list[GraphBatch | None], chosen), weight)
            else:
                if isinstance(layout, NodeLayout):
                    loss, counts = node_losses(model, live, keys, step, layout,
                                               cast(list[NodeBatch | None], chosen), whole)
                elif isinstance(layout, EdgeLayout):
                    loss, counts = pair_losses(model, live, keys, step, layout,
                                               cast(list[EdgeBatch | None], chosen))
                else:
                    loss, counts = graph_losses(model, live, keys, step,
                                                cast(list[GraphBatch | None], chosen))
                terms.append(loss)
            _descend(live, optimizer, terms + penalties.terms(live), weight, active)
            total += loss.detach() * counts
            samples += counts
            steps = [n + (b is not None) for n, b in zip(steps, chosen, strict=True)]
            step += 1
    for p in live.values():  # the trained stacks, leaves that record no more: no detach each
        p.requires_grad_(False)
    return _results(live, total, samples, steps)


def _edge_epochs(jobs: list[ClientJob], epochs: int) -> list[list[list[EdgeBatch]]]:
    """Each edge client's batches of ``epochs`` epochs, its training negatives drawn as its
    sequential fit draws them (PyG's ``negative_sampling``, from the global RNGs): seeded with
    its call seed as the runtime seeds a fit (``seeding.seed_all``), epoch after epoch. The
    caller's RNG states are kept."""
    drawn = []
    with preserved_rngs():
        for j in jobs:
            seed_all(j.seed)
            data = cast(PreparedEdgeClient, j.data)  # a group's clients are of one level
            drawn.append([list(data.batches("train", None, True)) for _ in range(epochs)])
    return drawn


def _keys(jobs: list[ClientJob], device: torch.device) -> Tensor:
    """The clients' dropout keys ``[K]`` (int32), from their call seeds."""
    return torch.tensor([j.seed & 0x7FFFFFFF for j in jobs], dtype=torch.int32, device=device)


def _descend(live: Params, optimizer: StackedOptimizer, terms: list[Tensor],
             weight: Tensor | None, active: Tensor | None) -> None:
    """One step of the clients that take it (``active``; None: all): the gradient of each
    client's objective (the sum of ``terms`` ``[K]``, times ``weight``, None for 1) and its
    update."""
    if terms:
        objective = functools.reduce(operator.add, terms)  # sum() would add a 0 first
        (objective if weight is None else objective * weight).sum().backward()
    optimizer.step(active)
    for p in live.values():
        p.grad = None


def _results(live: Params, total: Tensor, samples: Tensor, steps: list[int]
             ) -> list[tuple[Params, TrainStats]]:
    """Each client's trained parameters (views of ``live``) and statistics, from its summed
    losses, samples and steps."""
    trained = {n: v.unbind(0) for n, v in live.items()}
    # one read of the device for every client's statistics (counts are exact in float64)
    total_l, samples_l = torch.stack([total.double(), samples]).tolist()
    return [({n: v[k] for n, v in trained.items()},
             TrainStats(total_l[k] / max(samples_l[k], 1), steps[k], int(samples_l[k])))
            for k in range(len(steps))]


class _Penalties:
    """The clients' objective beyond their loss, stacked ``[K, ...]`` in tensors of their own
    that ``load`` fills: FedProx's proximal term (``mu`` ``[K]`` around ``anchor``, where any
    client has mu > 0) and SCAFFOLD's linear one (``offset``, zero for a client without)."""

    def __init__(self, live: Params, device: torch.device, proximal: bool, linear: bool):
        clients = len(next(iter(live.values())))
        self.mu = torch.zeros(clients, device=device) if proximal else None
        self.anchor = {n: torch.empty_like(v) for n, v in live.items()} if proximal else None
        self.offset = {n: torch.empty_like(v) for n, v in live.items()} if linear else None

    @staticmethod
    def kinds(jobs: list[ClientJob]) -> tuple[bool, bool]:
        """Which terms these jobs need: proximal, linear."""
        return (any(j.step.proximal_mu > 0 for j in jobs),
                any(j.step.gradient_offset is not None for j in jobs))

    @torch.no_grad()
    def load(self, jobs: list[ClientJob]) -> None:
        if self.mu is not None:
            self.mu.copy_(torch.tensor([j.step.proximal_mu for j in jobs]))
        for name, anchor in (self.anchor or {}).items():
            torch.stack([(j.step.anchor or j.step.params)[name] for j in jobs], out=anchor)
        for name, offset in (self.offset or {}).items():
            torch.stack([torch.zeros_like(offset[0]) if j.step.gradient_offset is None
                         else j.step.gradient_offset[name] for j in jobs], out=offset)

    def terms(self, live: Params) -> list[Tensor]:
        """The terms ``[K]`` each client adds to its loss."""
        terms = []
        if self.anchor is not None:
            assert self.mu is not None  # made with the anchor
            terms.append(proximal_penalty(self.mu, live, self.anchor, clients=True))
        if self.offset is not None:
            terms.append(linear_penalty(self.offset, live, clients=True))
        return terms


REPLAY_KEY = "replay"  # a group cache's recording, beside its layout


def _train_replayed(trainer: Trainer, jobs: list[ClientJob], epochs: int, layout: NodeLayout,
                    cache: Cache) -> list[tuple[Params, TrainStats]]:
    """``_train_group`` for full-batch node-level clients, whose every step is the same work:
    the whole training recorded as one graph after its first call on this group
    (``training.replay``) and replayed from then on, the jobs loaded into its inputs."""
    kinds = _Penalties.kinds(jobs)
    # what the recording bakes in as scalars (rates, sizes) or memory (the model's layers)
    signature = (epochs, kinds, repr(trainer.optimizer), id(trainer.model),
                 repr(getattr(trainer.model, "opts", None)),
                 tuple((n, v.shape, v.dtype) for n, v in jobs[0].step.params.items()))
    # one recording a group at most: another signature replaces it (and frees its memory)
    held = cache.get(REPLAY_KEY)
    if held is None or held[0] != signature:
        held = cache[REPLAY_KEY] = (signature, _ReplayedGroup(
            trainer, jobs[0].step.params, len(jobs), epochs, layout, kinds))
    group: _ReplayedGroup = held[1]
    trainer.model.train()
    total, samples = group.replay(lambda: group.load(jobs))
    with torch.no_grad():  # the next call overwrites the inputs: each client's own copy
        trained = {n: v.clone() for n, v in group.live.items()}
    return _results(trained, total, samples, [epochs] * len(jobs))


class _ReplayedGroup:
    """One group's full-batch training over inputs that live across calls (its parameters,
    keys and penalties, ``load``-ed from the jobs), as a ``Replay``."""

    def __init__(self, trainer: Trainer, params: Params, clients: int, epochs: int,
                 layout: NodeLayout, kinds: tuple[bool, bool]):
        device = trainer.device
        self.trainer, self.epochs, self.layout = trainer, epochs, layout
        self.live = {n: torch.empty((clients, *p.shape), dtype=p.dtype, device=device
                                    ).requires_grad_(True) for n, p in params.items()}
        self.keys = torch.zeros(clients, dtype=torch.int32, device=device)
        self.penalties = _Penalties(self.live, device, *kinds)
        self.replay = replay.Replay(self._run, device)

    @torch.no_grad()
    def load(self, jobs: list[ClientJob]) -> None:
        for name, stack in self.live.items():
            torch.stack([j.step.params[name] for j in jobs], out=stack)
        self.keys.copy_(_keys(jobs, torch.device("cpu")))
        self.penalties.load(jobs)

    def _run(self) -> tuple[Tensor, Tensor]:
        """Every epoch's step; the clients' summed losses and samples."""
        live, clients = self.live, len(self.keys)
        optimizer = StackedOptimizer(self.trainer.optimizer, live, clients)
        total = torch.zeros(clients, device=self.keys.device)
        samples = torch.zeros(clients, dtype=torch.long, device=self.keys.device)
        for step in range(self.epochs):
            loss, counts = node_losses(self.trainer.model, live, self.keys, step, self.layout,
                                       [], True)
            _descend(live, optimizer, [loss, *self.penalties.terms(live)], None, None)
            total += loss.detach() * counts
            samples += counts
        return total, samples
