"""Sparse CSR node features (``model.sparse_features``): bag-of-words features are mostly zeros
(Coauthor-Physics: 0.4% of 8,415), so the first layer's product with a CSR matrix costs a small
fraction of the dense one, with the same result up to float summation order.

The first layer's weight gradient is ``grad^T x``. PyTorch's own backward of ``F.linear`` on a
CSR input transposes ``x`` (a sort of its non-zeros) at every step; ``linear`` keeps the
transposed pattern of a client's features once and only permutes the (dropped-out) values.

The batched engine's ``vmap`` cannot map over a CSR matrix. There the clients' features are a
``PaddedCsr``: each client's stored values and their positions, padded to the longest client,
which ``vmap`` maps over like any tensor; the first layer's product is one block-diagonal sparse
product for all clients, as the neighbour sum is (``propagation``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from torch import Tensor, nn
from torch.utils.weak import WeakIdKeyDictionary

from graphfed.models.tensor_cache import derived

# a CSR matrix made by ``with_values`` -> the matrix whose pattern it shares
_PATTERN_OF: WeakIdKeyDictionary = WeakIdKeyDictionary()


def csr_matrix(crow: Tensor, col: Tensor, values: Tensor, size: tuple[int, int]) -> Tensor:
    """A CSR matrix from a pattern known valid, without PyTorch's "beta" notice."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(crow, col, values, size, check_invariants=False)


def to_csr(x: Tensor) -> Tensor:
    """``x`` as a CSR matrix, without PyTorch's one-time "beta" notice on every run."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return x.to_sparse_csr()


def is_csr(x: Tensor) -> bool:
    return x.layout == torch.sparse_csr


def with_values(x: Tensor, values: Tensor) -> Tensor:
    """The CSR matrix ``x`` with its stored values replaced (its pattern is known valid)."""
    out = csr_matrix(x.crow_indices(), x.col_indices(), values, tuple(x.shape))
    _PATTERN_OF[out] = _PATTERN_OF.get(x, x)
    return out


def row_pointers(rows_of_entries: Tensor, rows: int, dtype: torch.dtype = torch.long) -> Tensor:
    """A CSR matrix's ``crow_indices`` for entries sorted by row, given each entry's row."""
    crow = torch.zeros(rows + 1, dtype=dtype, device=rows_of_entries.device)
    crow[1:] = torch.bincount(rows_of_entries, minlength=rows).cumsum(0)
    return crow


def _entry_rows(x: Tensor) -> Tensor:
    """The row of each entry the CSR matrix ``x`` stores."""
    crow = x.crow_indices()
    return torch.repeat_interleave(torch.arange(x.size(0), device=crow.device), crow.diff())


def _transposed_pattern(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``x^T``'s row pointers and columns, and the order that takes ``x``'s values to it."""
    col = x.col_indices()
    order = torch.argsort(col, stable=True)  # rows stay ascending within a column
    return (row_pointers(col, x.size(1), x.crow_indices().dtype),
            _entry_rows(x)[order].to(col.dtype), order)


def transposed(x: Tensor) -> Tensor:
    """``x^T`` as a CSR matrix, its pattern built once for all matrices sharing ``x``'s."""
    pattern = _PATTERN_OF.get(x, x)
    t_crow, t_col, order = derived(pattern, None, ("transposed",),
                                   lambda: _transposed_pattern(pattern))
    return csr_matrix(t_crow, t_col, x.values()[order], (x.size(1), x.size(0)))


def _product(x: Tensor, weight: Tensor) -> Tensor:
    """``x W^T``. The sparse product reads ``W^T`` row-major, so PyTorch copies the transpose
    of ``W`` at every call. A ``W`` that is no trained parameter (a received model being
    evaluated) keeps its copy until it changes: every client evaluating one global model reads
    one. A trained one does not: fused optimizers update it in place without bumping its
    version, so nothing could tell its copy stale."""
    if weight.requires_grad:
        return torch.sparse.mm(x, weight.t())
    return torch.sparse.mm(x, derived(weight, None, ("transposed",),
                                      lambda: weight.t().contiguous()))


def _weight_gradient(x: Tensor, grad: Tensor) -> Tensor:
    """The gradient of ``x W^T`` with respect to ``W``: ``(x^T grad)^T``."""
    return torch.sparse.mm(transposed(x), grad).t()


class _CsrLinear(torch.autograd.Function):
    """``x W^T`` for constant CSR features ``x``; the gradient is ``W``'s alone."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor) -> Tensor:
        ctx.x = x
        return _product(x, weight)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return None, _weight_gradient(ctx.x, grad)


@dataclass
class PaddedCsr:
    """Sparse features ``vmap`` can map over: a client's stored values and their flat positions
    (``row * cols + col``) in its ``shape`` feature matrix, in row-major order, padded with
    value 0 at position -1. Stacked (``stack``), the tensors have a leading client dimension
    and each client under ``vmap`` sees its own. The positions are the dense matrix's element
    indices, so a keyed dropout hashing them draws the dense keyed mask's bits."""

    values: Tensor
    positions: Tensor
    shape: tuple[int, int]

    @staticmethod
    def of(x: Tensor) -> PaddedCsr:
        """The CSR matrix ``x`` (no padding), built once per matrix."""
        return derived(x, None, ("padded",), lambda: PaddedCsr(
            x.values().clone(), _flat_positions(x), tuple(x.shape)))

    @staticmethod
    def stack(matrices: list[Tensor], rows: int) -> PaddedCsr:
        """CSR matrices (one per client, at most ``rows`` rows, one column count) stacked
        ``[K, longest]``, each read as a ``rows``-row matrix."""
        width = max(1, max(m.values().numel() for m in matrices))
        values = matrices[0].values().new_zeros(len(matrices), width)
        positions = torch.full((len(matrices), width), -1, dtype=torch.long,
                               device=values.device)
        cols = matrices[0].size(1)
        for k, m in enumerate(matrices):
            values[k, :m.values().numel()] = m.values()
            positions[k, :m.values().numel()] = _flat_positions(m)
        return PaddedCsr(values, positions, (rows, cols))

    def with_values(self, values: Tensor) -> PaddedCsr:
        return PaddedCsr(values, self.positions, self.shape)

    def matrix(self) -> Tensor:
        """The CSR matrix these (unstacked) values and positions describe."""
        base, stored = derived(self.positions, None, ("csr", self.shape),
                               lambda: _pattern(self.positions, self.shape))
        return with_values(base, self.values[stored])


pytree.register_pytree_node(
    PaddedCsr, lambda x: ([x.values, x.positions], x.shape),
    lambda children, shape: PaddedCsr(children[0], children[1], shape))


def join_rows(matrices: list[Tensor]) -> Tensor:
    """CSR matrices with one column count as one, each one's rows under the previous one's."""
    stored = torch.tensor([0] + [m.values().numel() for m in matrices]).cumsum(0).tolist()
    crow = torch.cat([m.crow_indices()[:-1] + start for m, start in
                      zip(matrices, stored[:-1], strict=True)]
                     + [matrices[0].crow_indices().new_tensor([stored[-1]])])
    return csr_matrix(crow, torch.cat([m.col_indices() for m in matrices]),
                      torch.cat([m.values() for m in matrices]),
                      (sum(m.size(0) for m in matrices), matrices[0].size(1)))


def _flat_positions(x: Tensor) -> Tensor:
    """The CSR matrix ``x``'s stored elements' row-major indices ``row * cols + col``."""
    return _entry_rows(x) * x.size(1) + x.col_indices()


def _pattern(positions: Tensor, shape: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """A CSR matrix with the pattern of the stored ``positions`` (ascending, -1 for padding),
    and which positions are stored."""
    stored = torch.nonzero(positions >= 0).view(-1)
    flat = positions[stored]
    rows, cols = shape
    ones = torch.ones(flat.numel(), device=flat.device)
    return csr_matrix(row_pointers(flat // cols, rows), flat % cols, ones, shape), stored


def _block_positions(positions: Tensor, clients: int, shape: tuple[int, int]) -> Tensor:
    """``[K, L]`` positions of K ``shape`` matrices as positions in their block-diagonal
    ``[K * rows, K * cols]`` matrix, row-major; padding stays -1."""
    rows, cols = shape
    k = torch.arange(clients, device=positions.device).view(clients, 1)
    block = (k * rows + positions // cols) * (clients * cols) + k * cols + positions % cols
    return torch.where(positions >= 0, block, -1).reshape(-1)


class _PaddedProduct(torch.autograd.Function):
    """``x W^T`` for ``PaddedCsr`` features; under ``vmap`` the clients' matrices become one
    block-diagonal matrix and their weights one stacked ``[h, K * cols]`` weight."""

    @staticmethod
    def forward(values: Tensor, positions: Tensor, weight: Tensor, shape: tuple[int, int]
                ) -> Tensor:
        return _product(PaddedCsr(values, positions, shape).matrix(), weight)

    @staticmethod
    def setup_context(ctx, inputs, output) -> None:
        values, positions, _, ctx.shape = inputs
        ctx.save_for_backward(values, positions)

    @staticmethod
    def backward(ctx, grad: Tensor):
        values, positions = ctx.saved_tensors
        x = PaddedCsr(values, positions, ctx.shape).matrix()
        return None, None, _weight_gradient(x, grad), None

    @staticmethod
    def vmap(info, in_dims, values, positions, weight, shape):
        clients, source = info.batch_size, positions
        values, positions, weight = (client_first(t, d, clients) for t, d in
                                     zip((values, positions, weight), in_dims[:3], strict=True))
        block = derived(source, None, ("block", clients, shape, in_dims[1]),
                        lambda: _block_positions(positions, clients, shape))
        rows, cols = shape
        # W_k^T stacked [K * cols, h], passed as its transpose: the product reads it row-major
        stacked = weight.transpose(1, 2).reshape(clients * cols, -1)
        out = _PaddedProduct.apply(values.reshape(-1), block, stacked.t(),
                                   (clients * rows, clients * cols))
        return out.view(clients, rows, -1), 0


def client_first(t: Tensor, dim: int | None, clients: int) -> Tensor:
    """``t`` with its client dimension (``vmap``'s ``in_dims`` entry) first: the same tensor
    when it is, broadcast to every client when it has none."""
    if dim is None:
        return t.expand(clients, *t.shape)
    return t if dim == 0 else t.movedim(dim, 0)


def linear(x: Tensor | PaddedCsr, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear``, for CSR and ``PaddedCsr`` features too (their gradient never asked for)."""
    if isinstance(x, PaddedCsr):
        if x.values.requires_grad:
            raise ValueError("sparse features are constants; these require grad")
        out = _PaddedProduct.apply(x.values, x.positions, weight, x.shape)
        return out if bias is None else out + bias
    if not is_csr(x):
        return F.linear(x, weight, bias)
    if x.requires_grad:
        raise ValueError("sparse CSR features are constants; these require grad")
    if torch.is_grad_enabled() and weight.requires_grad:
        out = _CsrLinear.apply(x, weight)
    else:
        out = _product(x, weight)
    return out if bias is None else out + bias


class FeatureLinear(nn.Linear):
    """``nn.Linear`` (its parameters, names, initialisation) that may read CSR features."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)
