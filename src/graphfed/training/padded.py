"""The padded layout: the clients' graphs or mini-batches zero-padded to the largest client's
and stacked ``[K, ...]``, and one ``vmap`` pass of each client's own parameters over its own
rows. Padding rows and edges sit on a dummy node that no loss reads, so what a client computes
does not depend on who is padded beside it. Training (``training.batched``) and evaluation
(``training.batched_eval``) both run on it."""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar, cast

import torch
from torch import Tensor, nn
from torch.func import functional_call, vmap

from graphfed.models.dropout import Positions, keyed
from graphfed.models.sparse import PaddedCsr, is_csr
from graphfed.tensors import Params
from graphfed.training import plans
from graphfed.training.batches import (
    EdgeBatch,
    GraphBatch,
    GraphInputs,
    NodeBatch,
    NodeInputs,
    PreparedEdgeClient,
    PreparedNodeClient,
)

T = TypeVar("T")
# what a caller keeps between calls (layouts, recordings, sub-caches), by key
Cache = dict[Hashable, Any]
# one of a model's positional inputs (features, dense or CSR, edges, graph sizes, edge weights)
Input = Tensor | PaddedCsr | int | None


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


class PaddedGraphs:
    """The clients' message-passing graphs padded once: ``[K, N + 1, d]`` features
    (``PaddedCsr`` where the clients keep CSR features), where node N is the dummy that padding
    edges (weight 0) point at. Built once per set of clients and reused across rounds
    (``batched.train_together``'s ``cache``)."""

    def __init__(self, graphs: list[NodeInputs], nodes: int):
        self.dummy = nodes
        features = [x for x, _, _ in graphs]
        self.x = (PaddedCsr.stack(features, nodes + 1) if is_csr(features[0])
                  else _padded(features, nodes + 1))
        self.edge_index = _padded([edges.t() for _, edges, _ in graphs],
                                  max(edges.size(1) for _, edges, _ in graphs), nodes
                                  ).transpose(1, 2)
        weights = [weight for _, _, weight in graphs]
        # one model prepared them all: every client's edges are weighted, or none are
        self.edge_weight = (None if weights[0] is None
                            else _padded(cast(list[Tensor], weights), self.edge_index.size(2)))
        self.feature_nonzeros = (None if isinstance(self.x, PaddedCsr)
                                 else _sparse_positions(self.x, self.dummy))

    def inputs(self) -> tuple[Tensor | PaddedCsr, Tensor, Tensor | None]:
        return self.x, self.edge_index, self.edge_weight


class NodeLayout(PaddedGraphs):
    """Node-level clients' whole graphs padded (``PaddedGraphs``), with their labels and the
    nodes each step's loss reads."""

    def __init__(self, clients: list[PreparedNodeClient]):
        nodes = max(len(c.y) for c in clients)
        super().__init__([(c.x, c.edge_index, c.edge_weight) for c in clients], nodes)
        self.y = _padded([c.y for c in clients], nodes + 1)
        self.whole = self._targets([c.index["train"] for c in clients])  # full-batch steps

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


class EdgeLayout(PaddedGraphs):
    """Edge-level clients' training graphs padded (``PaddedGraphs``), the graph their
    training pairs are scored over; each step's pairs are padded by ``pairs``."""

    def __init__(self, clients: list[PreparedEdgeClient]):
        graphs = [c.graphs["train"] for c in clients]
        super().__init__([(g.x, g.edge_index, getattr(g, "edge_weight", None)) for g in graphs],
                         max(c.num_nodes for c in clients))

    def pairs(self, chosen: list[EdgeBatch | None]) -> tuple[Tensor, Tensor, Tensor]:
        """Per client its step's pairs ``[K, 2, P]`` (padded with the dummy pair), whether
        each is an edge and the mask of real ones ``[K, P]``."""
        device = self.edge_index.device
        pairs = [self.edge_index.new_zeros(2, 0) if b is None else b.pairs for b in chosen]
        edges = [torch.zeros(0, dtype=torch.bool, device=device) if b is None else b.y
                 for b in chosen]
        width = max(1, max(len(y) for y in edges))
        return (_padded([p.t() for p in pairs], width, self.dummy).transpose(1, 2),
                _padded(edges, width), _row_mask([len(y) for y in edges], width, device))


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


def graph_inputs(batches: list[GraphBatch | None], device: torch.device, feat_dim: int
                 ) -> tuple[GraphInputs, Tensor, Tensor]:
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


def cached_for(cache: Cache | None, key: tuple[Hashable, ...], build: Callable[[], T]) -> T:
    """``build()``, kept in ``cache`` under ``key``: one set of clients at a time, a new set
    replacing the last."""
    if cache is not None and key in cache:
        return cast(T, cache[key])  # what build() made for this key
    value = build()
    if cache is not None:
        cache.clear()
        cache[key] = value
    return value


def node_layout(clients: list[PreparedNodeClient], cache: Cache | None) -> NodeLayout:
    """The padded layout of ``clients``, from ``cache`` when it holds this very set."""
    return cached_for(cache, tuple(id(c) for c in clients), lambda: NodeLayout(clients))


def edge_layout(clients: list[PreparedEdgeClient], cache: Cache | None) -> EdgeLayout:
    """``node_layout`` for edge-level clients."""
    return cached_for(cache, tuple(id(c) for c in clients), lambda: EdgeLayout(clients))


def stacked_forward(model: nn.Module, live: Params, keys: Tensor | None, step: int,
                    inputs: tuple[Input, ...], batched_inputs: bool = True,
                    feature_nonzeros: Positions | None = None) -> Tensor:
    """Every client's logits ``[K, ...]``: its own parameters on its own padded inputs (with
    ``batched_inputs`` false, all on the same inputs), dropout keyed by its own seed (``keys``
    None: no keyed draws, as in evaluation) and, given ``feature_nonzeros``, on its features'
    non-zeros only (the same masks, fewer hashes)."""
    data_dims = tuple(0 if batched_inputs and isinstance(a, Tensor | PaddedCsr) else None
                      for a in inputs)
    if keys is None:
        def plain(params: Params, *args: Input) -> Tensor:
            logits: Tensor = functional_call(model, params, args)
            return logits

        stacked: Tensor = vmap(plain, in_dims=(0, *data_dims))(live, *inputs)
        return stacked

    elements = plans.for_device(keys.device).hash_elements  # hashed at once across the clients
    chunk = None if elements is None else max(1024, elements // len(keys))

    def one(params: Params, key: Tensor, nonzeros: Positions | None,
            *args: Input) -> Tensor:
        with keyed(key, step, nonzeros, chunk):
            logits: Tensor = functional_call(model, params, args)
            return logits

    drawn: Tensor = vmap(
        one, in_dims=(0, 0, None if feature_nonzeros is None else 0, *data_dims))(
        live, keys, feature_nonzeros, *inputs)
    return drawn
