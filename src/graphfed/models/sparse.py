"""Sparse CSR node features (``model.sparse_features``): bag-of-words features are mostly zeros
(Coauthor-Physics: 0.4% of 8,415), so the first layer's product with a CSR matrix costs a small
fraction of the dense one, with the same result up to float summation order.

The first layer's weight gradient is ``grad^T x``. PyTorch's own backward of ``F.linear`` on a
CSR input transposes ``x`` (a sort of its non-zeros) at every step; ``linear`` keeps the
transposed pattern of a client's features once and only permutes the (dropped-out) values.
"""

from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
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


def _transposed_pattern(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """``x^T``'s row pointers and columns, and the order that takes ``x``'s values to it."""
    rows, cols = x.shape
    crow, col = x.crow_indices(), x.col_indices()
    row = torch.repeat_interleave(torch.arange(rows, device=col.device), crow.diff())
    order = torch.argsort(col, stable=True)  # rows stay ascending within a column
    t_crow = torch.zeros(cols + 1, dtype=crow.dtype, device=crow.device)
    t_crow[1:] = torch.bincount(col, minlength=cols).cumsum(0)
    return t_crow, row[order].to(col.dtype), order


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


class _CsrLinear(torch.autograd.Function):
    """``x W^T`` for constant CSR features ``x``; the gradient is ``W``'s alone."""

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor) -> Tensor:
        ctx.x = x
        return _product(x, weight)

    @staticmethod
    def backward(ctx, grad: Tensor):
        return None, torch.sparse.mm(transposed(ctx.x), grad).t()


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``F.linear``, for CSR features too (their gradient never asked for)."""
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
