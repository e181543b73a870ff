"""Many clients' local steps trained together: the batched engine.

The clients' parameters are stacked (``[K, ...]``) and one ``torch.func.vmap`` over
``functional_call`` runs every client's forward pass at once, on its own parameters and its own
data, zero-padded to the largest client (padding rows and edges sit on a dummy node that no loss
reads); one backward pass gives each client its own gradient, since the objective is the sum of
the clients' own losses; ``StackedOptimizer`` applies each client's Adam or SGD update. Clients
with fewer mini-batches than their neighbours are masked out of the steps they do not have.
Graph-level clients on the CPU are joined instead of padded (``training.joined``), all in one
step, in passes of about ``PASS_ROWS`` nodes.

Randomness is per client: its shuffling comes from a generator seeded with its own call seed,
and its dropout masks from that seed through ``models.dropout.keyed``, so what a client draws
does not depend on who trains beside it. With dropout off a client's result equals the
sequential ``Trainer.train`` (same shuffles, same arithmetic up to summation order).
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call, vmap

from graphfed.models.dropout import Positions, keyed
from graphfed.models.sparse import PaddedCsr, is_csr
from graphfed.tensors import Params
from graphfed.training import plans, replay
from graphfed.training.batches import GraphBatch, NodeBatch, PreparedClient, PreparedNodeClient
from graphfed.training.joined import join_clients, joined_forward, joins
from graphfed.training.stacked_optim import StackedOptimizer
from graphfed.training.step import LocalStep, linear_penalty, proximal_penalty
from graphfed.training.trainer import Trainer, TrainStats

# node rows one joined forward and backward pass holds, so that a step's activations stay
# bounded however many clients train together. On the 2-core CPU the fewer the passes the
# better (benchmarks/joined_pass.py, PROTEINS' ten clients, 15k nodes a step: a round 1.07x
# the centralized epoch at this budget, which is one pass there, 1.14x at 4,096 rows)
PASS_ROWS = 16384


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
    if opts.name == "gat" and opts.dropout > 0:
        return "GAT's attention dropout draws from the global RNG"
    if isinstance(data, PreparedNodeClient) and (
            data.sampler is not None or data.sampling.train_fraction < 1.0):
        return "it trains on sampled neighbourhoods or node subsets"
    return None


def _padded(rows: list[Tensor], length: int, fill: float | int = 0) -> Tensor:
    """``rows`` (each ``[n_k, ...]``) stacked into ``[K, length, ...]``, filled past ``n_k``:
    their concatenation put in place at once, not a copy a client (on a GPU, a launch each)."""
    out = rows[0].new_full((len(rows), length, *rows[0].shape[1:]), fill)
    sizes = [len(row) for row in rows]
    if sum(sizes):
        slots = _row_slots(sizes, length, out.device)
        out.view(-1, *rows[0].shape[1:])[slots] = torch.cat(rows)
    return out


def _row_slots(sizes: list[int], length: int, device: torch.device) -> Tensor:
    """The flat positions ``k * length + i`` of every client k's rows i < ``sizes[k]``, in
    order, computed on ``device`` from the sizes alone."""
    counts = torch.tensor(sizes, device=device)
    # each client's first slot, less where its rows start in the concatenation
    shift = torch.arange(len(sizes), device=device) * length - (counts.cumsum(0) - counts)
    total = sum(sizes)
    return (shift.repeat_interleave(counts, output_size=total)
            + torch.arange(total, device=device))


def _row_mask(sizes: list[int], length: int, device: torch.device) -> Tensor:
    """``[K, length]``: true at every client k's first ``sizes[k]`` positions."""
    return (torch.arange(length, device=device)
            < torch.tensor(sizes, device=device).unsqueeze(1))


class NodeLayout:
    """The clients' whole graphs padded once: ``[K, N + 1, d]`` features (``PaddedCsr`` where
    the clients keep CSR features), where node N is the dummy that padding edges (weight 0)
    point at. Built once per set of clients and reused across rounds (``train_together``'s
    ``cache``)."""

    def __init__(self, clients: list[PreparedNodeClient]):
        nodes = max(len(c.y) for c in clients)
        self.dummy = nodes
        features = [c.x for c in clients]
        self.x = (PaddedCsr.stack(features, nodes + 1) if is_csr(features[0])
                  else _padded(features, nodes + 1))
        self.y = _padded([c.y for c in clients], nodes + 1)
        self.edge_index = _padded([c.edge_index.t() for c in clients],
                                  max(c.edge_index.size(1) for c in clients), nodes
                                  ).transpose(1, 2)
        weights = [c.edge_weight for c in clients]
        self.edge_weight = (None if weights[0] is None
                            else _padded(weights, self.edge_index.size(2)))
        self.whole = self._targets([c.index["train"] for c in clients])  # full-batch steps
        self.feature_nonzeros = (None if isinstance(self.x, PaddedCsr)
                                 else _sparse_positions(self.x, self.dummy))

    def inputs(self) -> tuple:
        return self.x, self.edge_index, self.edge_weight

    def targets(self, chosen: list[NodeBatch | None], whole: bool
                ) -> tuple[Tensor, Tensor, Tensor]:
        """Per client the nodes its loss reads (padded with the dummy), their labels and the
        mask of real ones; ``whole``: every client's whole train split."""
        if whole:
            return self.whole
        none = self.y.new_zeros(0)
        return self._targets([b.index if b is not None else none for b in chosen])

    def _targets(self, index: list[Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        width = max(1, max(len(i) for i in index))
        positions = _padded(index, width, self.dummy)
        mask = _row_mask([len(i) for i in index], width, positions.device)
        return positions, self.y.gather(1, positions), mask


def _sparse_positions(x: Tensor, dummy: int) -> Positions | None:
    """Per client the flat positions of its features' non-zeros ``[K, nnz_max]``, padded with
    the dummy node's first (zero) element, prepared for hashing; None unless under half the
    features are non-zero (bag-of-words: Cora 1.3 %), where dropout on the features hashes
    these positions only."""
    present = x != 0
    if present.sum() * 2 >= present.numel():
        return None
    positions = [row.reshape(-1).nonzero().view(-1) for row in present]
    return Positions.of(_padded(positions, max(1, max(len(p) for p in positions)),
                                dummy * x.size(2)))


def graph_inputs(batches: list[GraphBatch | None], device: torch.device, feat_dim: int):
    """One step's mini-batches of whole graphs padded to ``[K, nodes + 1, d]``; the dummy node
    belongs to a dummy graph G (``G + 1`` graphs pooled); labels ``[K, G]`` with their mask."""
    empty = GraphBatch(torch.zeros(0, feat_dim, device=device),
                       torch.zeros(2, 0, dtype=torch.long, device=device), None,
                       torch.zeros(0, dtype=torch.long, device=device), 0,
                       torch.zeros(0, dtype=torch.long, device=device),
                       torch.zeros(0, dtype=torch.long, device=device))
    real = [b if b is not None else empty for b in batches]
    nodes = max(len(b.x) for b in real)
    graphs = max(1, max(b.num_graphs for b in real))
    x = _padded([b.x for b in real], nodes + 1)
    edge_index = _padded([b.edge_index.t() for b in real],
                         max(1, max(b.edge_index.size(1) for b in real)), nodes).transpose(1, 2)
    weighted = [b for b in batches if b is not None and b.edge_weight is not None]
    edge_weight = (_padded([b.edge_weight if b.edge_weight is not None
                            else torch.zeros(0, device=device) for b in real],
                           edge_index.size(2)) if weighted else None)
    batch = _padded([b.batch for b in real], nodes + 1, graphs)
    y = _padded([b.y for b in real], graphs)
    mask = _row_mask([b.num_graphs for b in real], graphs, device)
    return (x, edge_index, batch, graphs + 1, edge_weight), y, mask


def step_size(data: PreparedClient, batch_size: int | None) -> float:
    """The nodes a client brings to one padded step: its whole graph (node level), or about
    one mini-batch's share of its training graphs' nodes (graph level)."""
    if isinstance(data, PreparedNodeClient):
        return float(len(data.y))
    graphs = data.splits["train"]
    if graphs.num_graphs == 0:
        return 0.0
    share = 1.0 if batch_size is None else min(1.0, batch_size / graphs.num_graphs)
    return len(graphs.x) * share


# sizes within this factor of each other are one run of ``size_groups``' search
RUN_SPREAD = 1.01


def size_groups(sizes: list[float], spread: float, pass_rows: float = math.inf,
                max_rows: float = math.inf) -> list[list[int]]:
    """Positions of ``sizes`` in groups, each padded to its largest member, that cost the
    fewest padded rows plus ``pass_rows`` a group (what one more pass costs, in rows), with no
    group's largest more than ``spread`` times its smallest (one client of 6,224 nodes beside
    nine of 300-2,300 would otherwise pad them all to its size) and none padded to more than
    ``max_rows`` rows unless it is one client. Groups are runs of the sizes sorted largest
    first, found by dynamic programming over runs of sizes within 1% of each other (padded to
    the run's largest, and cut where ``max_rows`` says), so ten thousand similar clients cost
    a few hundred steps, not a hundred million. ``pass_rows`` infinite: as few groups as the
    bounds allow."""
    order = sorted(range(len(sizes)), key=lambda k: -sizes[k])
    runs: list[list[int]] = []  # positions, largest first, within 1% of their run's first
    for k in order:
        if (runs and sizes[k] * RUN_SPREAD >= sizes[runs[-1][0]]
                and (len(runs[-1]) + 1) * sizes[runs[-1][0]] <= max_rows):
            runs[-1].append(k)
        else:
            runs.append([k])
    # cost[j]: (groups, padded rows) of the best grouping of runs[:j]; compared as rows
    # weighted by pass_rows, or groups first where a pass is worth more than any padding
    cost: list[tuple[int, float]] = [(0, 0.0)]
    start: list[int] = [0]
    for j in range(1, len(runs) + 1):
        smallest, members, best = sizes[runs[j - 1][-1]], 0, None
        for i in range(j - 1, -1, -1):
            largest = sizes[runs[i][0]]
            if largest > spread * smallest or (
                    i < j - 1 and (members + len(runs[i])) * largest > max_rows):
                break
            members += len(runs[i])
            candidate = (cost[i][0] + 1, cost[i][1] + members * largest)
            if best is None or _cheaper(candidate, best[0], pass_rows):
                best = (candidate, i)
        cost.append(best[0])
        start.append(best[1])
    groups: list[list[int]] = []
    j = len(runs)
    while j:
        groups.append([k for run in runs[start[j]:j] for k in run])
        j = start[j]
    return groups[::-1]


def _cheaper(a: tuple[int, float], b: tuple[int, float], pass_rows: float) -> bool:
    """Whether grouping cost ``a`` (groups, padded rows) is below ``b``."""
    if math.isinf(pass_rows):
        return a < b
    return a[0] * pass_rows + a[1] < b[0] * pass_rows + b[1]


def group_rows(trainer: Trainer, data: PreparedClient) -> float:
    """The most padded rows a group of clients like ``data`` may hold on the trainer's device:
    the plan's ``group_bytes`` over a row's widest activation (the input features where they
    are dense, else the widest layer output)."""
    x = _features(data)
    widths = [p.size(0) for p in trainer.model.parameters() if p.dim() >= 2]
    if not is_csr(x):
        widths.append(x.size(-1))
    return plans.for_device(trainer.device).group_bytes / (max(widths) * x.element_size())


def _features(data: PreparedClient) -> Tensor:
    return data.x if isinstance(data, PreparedNodeClient) else data.splits["train"].x


def row_macs(model: nn.Module, x: Tensor) -> float:
    """Multiply-adds a padded row costs a forward pass, roughly: the sizes of the model's
    weight matrices, those that read the input features scaled by the features' density where
    they are CSR (a sparse product skips the zeros)."""
    width = x.size(-1)
    density = x.values().numel() / max(x.size(0) * width, 1) if is_csr(x) else 1.0
    return float(sum(p.numel() * (density if p.size(-1) == width else 1.0)
                     for p in model.parameters() if p.dim() >= 2)) or 1.0


def train_together(trainer: Trainer, jobs: list[ClientJob], epochs: int,
                   batch_size: int | None, cache: dict | None = None,
                   joined: bool | None = None, record: bool = False
                   ) -> list[tuple[Params, TrainStats]]:
    """Each job's ``LocalStep`` for ``epochs``, as ``Trainer.train`` returns it (the trained
    parameters, views of one stack, and ``TrainStats``); a client's result does not depend on
    who trains beside it. Graph-level clients in the joined layout (``joined``; None: wherever
    ``joined.joins`` says it serves) train all in one pass per step, unpadded; otherwise
    clients train in padded groups of similar size, one pass per group and step
    (``by_size_group``). ``cache`` keeps each group's padded node layout between calls.
    ``record``: a group trained on whole graphs (node level, full batch) is recorded once
    and replayed where ``replay.available`` says the device can (``_train_replayed``)."""
    graph_level = not isinstance(jobs[0].data, PreparedNodeClient)
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


def by_size_group(trainer: Trainer, clients: list[PreparedClient], sizes: list[float],
                  cache: dict | None, run: Callable[[list[int], dict | None], list]) -> list:
    """``run(members, group_cache)`` for each group of ``size_groups`` over ``sizes`` (the
    clients' rows a padded pass), as the device's plan weighs padding against passes; its
    results put back in the order of ``sizes``. ``cache`` keeps one sub-cache per group."""
    plan = plans.for_device(trainer.device)
    pass_rows = plan.pass_macs / row_macs(trainer.model, _features(clients[0]))
    groups = size_groups(sizes, plan.size_spread, pass_rows, group_rows(trainer, clients[0]))
    if cache is not None:
        for stale in [g for g in cache if not isinstance(g, int) or g >= len(groups)]:
            del cache[stale]
    results: list = [None] * len(sizes)
    for g, members in enumerate(groups):
        group_cache = None if cache is None else cache.setdefault(g, {})
        for k, result in zip(members, run(members, group_cache), strict=True):
            results[k] = result
    return results


def _train_group(trainer: Trainer, jobs: list[ClientJob], epochs: int,
                 batch_size: int | None, cache: dict | None, joined: bool = False,
                 record: bool = False) -> list[tuple[Params, TrainStats]]:
    """``train_together`` for one group: all its clients in one stacked pass per step."""
    model, device, clients = trainer.model, trainer.device, len(jobs)
    layout = (node_layout([j.data for j in jobs], cache)
              if isinstance(jobs[0].data, PreparedNodeClient) else None)
    whole = batch_size is None or batch_size >= max(j.data.num_samples("train") for j in jobs)
    if record and layout is not None and whole and cache is not None and replay.available(
            device):
        return _train_replayed(trainer, jobs, epochs, layout, cache)
    live = {name: torch.stack([j.step.params[name] for j in jobs]).requires_grad_(True)
            for name in jobs[0].step.params}
    penalties = _Penalties(live, device, *_Penalties.kinds(jobs))
    penalties.load(jobs)
    optimizer = StackedOptimizer(trainer.optimizer, live, clients)
    keys = _keys(jobs, device)
    generators = [torch.Generator().manual_seed(j.seed) for j in jobs]
    total = torch.zeros(clients, device=device)
    samples = torch.zeros(clients, dtype=torch.long, device=device)
    steps = [0] * clients  # counted on the host, where the batches are chosen
    model.train()
    step = 0
    for _ in range(epochs):
        # each client's own epoch of batches, shuffled by its own generator
        epoch = [iter(j.data.batches("train", batch_size, True, g))
                 for j, g in zip(jobs, generators, strict=True)]
        while True:
            chosen = [next(batches, None) for batches in epoch]
            if all(b is None for b in chosen):
                break
            active = None if all(b is not None for b in chosen) else torch.tensor(
                [b is not None for b in chosen], device=device)
            weight = None if active is None else active.float()  # None: every client steps
            terms = []  # per client, still to be backpropagated
            if joined:  # the losses' gradients are in the stacks already
                loss, counts = _joined_backward(model, live, keys, step, chosen, weight)
            else:
                loss, counts = (
                    _node_losses(model, live, keys, step, layout, chosen, whole)
                    if layout is not None else _graph_losses(model, live, keys, step, chosen))
                terms.append(loss)
            _descend(live, optimizer, terms + penalties.terms(live), weight, active)
            total += loss.detach() * counts
            samples += counts
            steps = [n + (b is not None) for n, b in zip(steps, chosen, strict=True)]
            step += 1
    for p in live.values():  # the trained stacks, leaves that record no more: no detach each
        p.requires_grad_(False)
    return _results(live, total, samples, steps)


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
            terms.append(proximal_penalty(self.mu, live, self.anchor, clients=True))
        if self.offset is not None:
            terms.append(linear_penalty(self.offset, live, clients=True))
        return terms


REPLAY_KEY = "replay"  # a group cache's recording, beside its layout


def _train_replayed(trainer: Trainer, jobs: list[ClientJob], epochs: int, layout: NodeLayout,
                    cache: dict) -> list[tuple[Params, TrainStats]]:
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
    group = held[1]
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
            loss, counts = _node_losses(self.trainer.model, live, self.keys, step, self.layout,
                                        [], True)
            _descend(live, optimizer, [loss, *self.penalties.terms(live)], None, None)
            total += loss.detach() * counts
            samples += counts
        return total, samples


def _node_losses(model, live: Params, keys: Tensor, step: int, layout: NodeLayout,
                 chosen: list[NodeBatch | None], whole: bool) -> tuple[Tensor, Tensor]:
    """Each client's mean loss on its batch of this step ``[K]`` and the batch's size."""
    positions, targets, mask = layout.targets(chosen, whole)
    logits = stacked_forward(model, live, keys, step, layout.inputs(),
                             feature_nonzeros=layout.feature_nonzeros)
    return _masked_mean_losses(
        logits.gather(1, positions.unsqueeze(-1).expand(-1, -1, logits.size(-1))), targets, mask)


def _graph_losses(model, live: Params, keys: Tensor, step: int,
                  chosen: list[GraphBatch | None], joined: bool = False
                  ) -> tuple[Tensor, Tensor]:
    """``_node_losses`` for mini-batches of graphs: joined where asked and a row count names
    its layout (``joined.join_clients``), else padded."""
    joined_batch = join_clients(chosen) if joined else None
    if joined_batch is None:
        features = next(b for b in chosen if b is not None).x.size(1)
        inputs, targets, mask = graph_inputs(chosen, keys.device, features)
        logits = stacked_forward(model, live, keys, step, inputs)
        return _masked_mean_losses(logits[:, :targets.size(1)], targets, mask)
    owner = joined_batch.graphs.owner
    losses = F.cross_entropy(joined_forward(model, live, joined_batch, keys, step),
                             joined_batch.labels, reduction="none")
    counts = torch.bincount(owner, minlength=len(chosen))
    return losses.new_zeros(len(chosen)).index_add(0, owner, losses) / counts.clamp(min=1), counts


def _joined_backward(model, live: Params, keys: Tensor, step: int,
                     chosen: list[GraphBatch | None], weight: Tensor | None
                     ) -> tuple[Tensor, Tensor]:
    """``_graph_losses`` in the joined layout, their gradients (times ``weight``, None for 1)
    accumulated in the stacks: the clients in passes of about ``PASS_ROWS`` nodes
    (``client_passes``), each a forward and a backward pass. The clients' losses are
    independent, so the passes add up to one pass's gradients."""
    losses, counts = [], []
    for a, b in client_passes([0 if c is None else len(c.x) for c in chosen], PASS_ROWS):
        if all(c is None for c in chosen[a:b]):
            losses.append(torch.zeros(b - a, device=keys.device))
            counts.append(torch.zeros(b - a, dtype=torch.long, device=keys.device))
            continue
        loss, count = _graph_losses(model, {n: v[a:b] for n, v in live.items()}, keys[a:b],
                                    step, chosen[a:b], joined=True)
        (loss if weight is None else loss * weight[a:b]).sum().backward()
        losses.append(loss.detach())
        counts.append(count)
    return torch.cat(losses), torch.cat(counts)


def client_passes(rows: list[int], budget: int) -> list[tuple[int, int]]:
    """Consecutive clients ``[a, b)``, each run closed once it holds ``budget`` rows (so
    under ``2 * budget`` but for one larger client: as few passes as the rows need), covering
    every client once, in order."""
    passes, start, held = [], 0, 0
    for k, n in enumerate(rows):
        held += n
        if held >= budget:
            passes.append((start, k + 1))
            start, held = k + 1, 0
    if start < len(rows) or not passes:
        passes.append((start, len(rows)))
    return passes


def _masked_mean_losses(logits: Tensor, targets: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per client (padded ``[K, n, C]`` logits) the mean loss over its real rows, and their
    count."""
    counts = mask.sum(1)
    losses = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1),
                             reduction="none").view_as(targets)
    return (losses * mask).sum(1) / counts.clamp(min=1), counts


def cached_for(cache: dict | None, key: tuple, build):
    """``build()``, kept in ``cache`` under ``key``: one set of clients at a time, a new set
    replacing the last."""
    if cache is not None and key in cache:
        return cache[key]
    value = build()
    if cache is not None:
        cache.clear()
        cache[key] = value
    return value


def node_layout(clients: list[PreparedNodeClient], cache: dict | None) -> NodeLayout:
    """The padded layout of ``clients``, from ``cache`` when it holds this very set."""
    return cached_for(cache, tuple(id(c) for c in clients), lambda: NodeLayout(clients))


def stacked_forward(model, live: Params, keys: Tensor | None, step: int, inputs: tuple,
                    batched_inputs: bool = True, feature_nonzeros: Positions | None = None
                    ) -> Tensor:
    """Every client's logits ``[K, ...]``: its own parameters on its own padded inputs (with
    ``batched_inputs`` false, all on the same inputs), dropout keyed by its own seed (``keys``
    None: no keyed draws, as in evaluation) and, given ``feature_nonzeros``, on its features'
    non-zeros only (the same masks, fewer hashes)."""
    data_dims = tuple(0 if batched_inputs and isinstance(a, Tensor | PaddedCsr) else None
                      for a in inputs)
    if keys is None:
        def plain(params, *args):
            return functional_call(model, params, args)

        return vmap(plain, in_dims=(0, *data_dims))(live, *inputs)

    elements = plans.for_device(keys.device).hash_elements  # hashed at once across the clients
    chunk = None if elements is None else max(1024, elements // len(keys))

    def one(params, key, nonzeros, *args):
        with keyed(key, step, nonzeros, chunk):
            return functional_call(model, params, args)

    return vmap(one, in_dims=(0, 0, None if feature_nonzeros is None else 0, *data_dims))(
        live, keys, feature_nonzeros, *inputs)
