"""GCN's weighted neighbour sum as one sparse matrix product, and many clients' as one.

``weighted_sum(y, edge_index, edge_weight)`` returns ``out[t] = sum_e weight_e * y[source_e]``
over the edges ``(source_e, t)`` into ``t`` (Kipf & Welling, ICLR 2017, Eq. 2 with the
normalised weights computed once in ``prepare``). PyG's message passing gathers one row per
edge and scatters it back; a CSR product reads the same numbers without materialising the
per-edge rows, about three times faster on the CPU. Under ``torch.func.vmap`` (the batched engine)
the clients' padded graphs become one block-diagonal CSR matrix and one product, instead of a
gather and a scatter with per-client index tensors expanded to every feature.

Its backward is the product with the transpose (every edge reversed); the edge weights are
constants (GCN's normalisation), never trained.
"""

from __future__ import annotations

import torch
from torch import Tensor

from graphfed.models.sparse import client_first, csr_matrix, row_pointers
from graphfed.models.tensor_cache import derived


def _adjacency(source: Tensor, target: Tensor, weight: Tensor | None, rows: int, cols: int,
               dtype: torch.dtype) -> Tensor:
    """The ``rows x cols`` CSR matrix with ``weight`` (1 when None) at (target, source): rows by
    target, so the edges are sorted by target first when they are not already (prepared edges
    are)."""
    weight = (torch.ones(source.numel(), dtype=dtype, device=source.device) if weight is None
              else weight.to(dtype))
    if source.numel() > 1 and bool((target[1:] < target[:-1]).any()):
        order = torch.argsort(target, stable=True)
        source, target, weight = source[order], target[order], weight[order]
    else:
        source = source.clone()  # not a view of the edge tensor (see tensor_cache.derived)
    return csr_matrix(row_pointers(target, rows), source, weight, (rows, cols))


def _matrix(edge_index: Tensor, weight: Tensor | None, rows: int, cols: int,
            dtype: torch.dtype, transpose: bool) -> Tensor:
    """``_adjacency`` of these edges (``transpose``: every edge reversed), built once."""
    source, target = (edge_index[1], edge_index[0]) if transpose else edge_index
    return derived(edge_index, weight, ("csr", rows, cols, dtype, transpose),
                    lambda: _adjacency(source, target, weight, rows, cols, dtype))


def _block_diagonal(edge_index: Tensor, edge_dim: int | None, weight: Tensor | None,
                    weight_dim: int | None, clients: int, nodes: int, size: int
                    ) -> tuple[Tensor, Tensor | None]:
    """K clients' edges as one graph: client k's sources shifted by ``k * nodes`` and its
    targets by ``k * size``, so its edges stay sorted by target and never reach another
    client; built once per stacked edge tensor (the batched engine's padded layout serves
    every step), and then so is its CSR matrix."""
    def build() -> tuple[Tensor, Tensor | None]:
        shift = torch.arange(clients, device=edge_index.device).view(clients, 1, 1) * (
            torch.tensor([[nodes], [size]], device=edge_index.device))
        flat = (client_first(edge_index, edge_dim, clients) + shift).transpose(0, 1).reshape(2, -1)
        return flat, (None if weight is None
                      else client_first(weight, weight_dim, clients).reshape(-1).clone())

    return derived(edge_index, weight, ("block", edge_dim, weight_dim, clients, nodes, size),
                    build)


def _product(y: Tensor, edge_index: Tensor, weight: Tensor | None, size: int) -> Tensor:
    return torch.sparse.mm(_matrix(edge_index, weight, size, y.size(0), y.dtype, False), y)


def _save(ctx, y: Tensor, edge_index: Tensor, weight: Tensor | None, size: int) -> None:
    ctx.shape = (y.size(0), size)
    ctx.save_for_backward(edge_index, weight)


def _backward(ctx, grad: Tensor):
    """The gradient with respect to ``y``: the product with the transpose."""
    edge_index, weight = ctx.saved_tensors
    inputs, size = ctx.shape
    transposed = _matrix(edge_index, weight, inputs, size, grad.dtype, True)
    return torch.sparse.mm(transposed, grad), None, None, None


class _WeightedSum(torch.autograd.Function):
    """The product with a ``vmap`` rule, for functorch transforms (the batched engine)."""

    @staticmethod
    def forward(y: Tensor, edge_index: Tensor, weight: Tensor | None, size: int) -> Tensor:
        return _product(y, edge_index, weight, size)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        _save(ctx, *inputs)

    backward = staticmethod(_backward)

    @staticmethod
    def vmap(info, in_dims, y, edge_index, weight, size):
        """K clients' padded graphs as one block-diagonal graph (``_block_diagonal``)."""
        clients = info.batch_size
        y = client_first(y, in_dims[0], clients)
        nodes = y.size(1)
        edges, flat_weight = _block_diagonal(edge_index, in_dims[1], weight, in_dims[2],
                                             clients, nodes, size)
        # one level below vmap: the eager product (or the plain one, recording nothing)
        out = weighted_sum(y.reshape(clients * nodes, *y.shape[2:]), edges, flat_weight,
                           clients * size)
        return out.view(clients, size, *out.shape[1:]), 0


class _EagerWeightedSum(torch.autograd.Function):
    """The same product outside transforms: a ``forward`` that takes ``ctx`` spares the
    signature binding ``Function.apply`` does for ``setup_context`` functions (tens of
    microseconds a call, twice per GCN layer and step)."""

    @staticmethod
    def forward(ctx, y: Tensor, edge_index: Tensor, weight: Tensor | None, size: int) -> Tensor:
        _save(ctx, y, edge_index, weight, size)
        return _product(y, edge_index, weight, size)

    backward = staticmethod(_backward)


def weighted_sum(y: Tensor, edge_index: Tensor, edge_weight: Tensor | None,
                 size: int | None = None) -> Tensor:
    """``out[t] = sum over edges (s, t) of edge_weight * y[s]`` (weight 1 when None), for
    ``size`` targets (default: as many as ``y`` has rows)."""
    if edge_weight is not None and edge_weight.requires_grad:
        raise ValueError("weighted_sum treats edge weights as constants; these require grad")
    size = y.size(0) if size is None else size
    if torch._C._are_functorch_transforms_active():  # vmap: the batched engine
        return _WeightedSum.apply(y, edge_index, edge_weight, size)
    if not (torch.is_grad_enabled() and y.requires_grad):  # evaluation: no graph to record
        return _product(y, edge_index, edge_weight, size)
    return _EagerWeightedSum.apply(y, edge_index, edge_weight, size)


def _membership(x: Tensor, batch: Tensor) -> Tensor:
    """The node -> graph edges of ``batch`` (node i belongs to graph ``batch[i]``): kept beside
    ``batch`` outside transforms, so a batch that comes back (a whole split scored every round,
    full-batch training) finds its edges, and so their matrix, built (``derived``)."""
    def build() -> Tensor:
        return torch.stack([torch.arange(x.size(0), device=x.device), batch])

    if torch._C._are_functorch_transforms_active():  # batch is vmap's wrapper of this call
        return build()
    return derived(batch, None, ("membership", x.size(0)), build)


def sum_pool(x: Tensor, batch: Tensor, num_graphs: int) -> Tensor:
    """Every graph's node rows summed (GIN's readout, Xu et al., ICLR 2019, Eq. 4.2): a
    weighted sum along node -> graph edges."""
    return weighted_sum(x, _membership(x, batch), None, num_graphs)


def mean_pool(x: Tensor, batch: Tensor, num_graphs: int) -> Tensor:
    """Every graph's node rows averaged (an empty graph's row stays zero); the sums and the
    counts share one membership matrix."""
    edges = _membership(x, batch)
    counts = weighted_sum(torch.ones_like(x[:, :1]), edges, None, num_graphs)
    return weighted_sum(x, edges, None, num_graphs) / counts.clamp(min=1)
