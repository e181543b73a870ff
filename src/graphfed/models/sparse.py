"""Sparse CSR node features (``model.sparse_features``): bag-of-words features are mostly zeros
(Coauthor-Physics: 0.4% of 8,415), so the first layer's product with a CSR matrix costs a small
fraction of the dense one, with the same result up to float summation order."""

from __future__ import annotations

import warnings

import torch
from torch import Tensor


def to_csr(x: Tensor) -> Tensor:
    """``x`` as a CSR matrix, without PyTorch's one-time "beta" notice on every run."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return x.to_sparse_csr()


def is_csr(x: Tensor) -> bool:
    return x.layout == torch.sparse_csr


def with_values(x: Tensor, values: Tensor) -> Tensor:
    """The CSR matrix ``x`` with its stored values replaced (its pattern is known valid)."""
    return torch.sparse_csr_tensor(x.crow_indices(), x.col_indices(), values, x.size(),
                                   check_invariants=False)
