"""Dropout whose masks can come from per-client keys instead of the global RNG.

The batched engine trains many clients in one vmapped pass, where the global RNG would give a
client masks that depend on who trains beside it. Under ``keyed(keys)`` every ``dropout`` call
draws its mask from a counter-based hash of (the client's key, the call's salt, the element's
index): a client's masks depend on its key alone, and are the same on every device. Outside
that context ``dropout`` is ``F.dropout``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from graphfed.models.sparse import is_csr, with_values

MASK32 = 0xFFFFFFFF


def _int32(value: int) -> int:
    """A 32-bit constant as the signed value an int32 tensor holds."""
    return value - (1 << 32) if value >= 1 << 31 else value


GOLDEN, MIX1, MIX2, SALT = (_int32(c) for c in (0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F))


def _fmix32(h: Tensor) -> Tensor:
    """MurmurHash3's 32-bit finaliser (a bijection) on int32 tensors: multiplications wrap,
    and each right shift is masked into a logical one."""
    h = h ^ ((h >> 16) & 0xFFFF)
    h = h * MIX1
    h = h ^ ((h >> 13) & 0x7FFFF)
    h = h * MIX2
    return h ^ ((h >> 16) & 0xFFFF)


def keyed_keep(key: Tensor, salt: int, shape: torch.Size, p: float) -> Tensor:
    """A keep-mask (each element kept with probability 1 - p) for ``shape`` from ``key`` (an
    int32 tensor, a per-client scalar under vmap) and ``salt`` (which call this is): element
    i's 24-bit hash of (key, salt, i) against p * 2**24."""
    base = _fmix32(key ^ _int32((salt * SALT) & MASK32))
    index = torch.arange(shape.numel(), device=key.device, dtype=torch.int32).view(shape)
    return (_fmix32(index * GOLDEN + base) & 0xFFFFFF) >= round(p * (1 << 24))


@dataclass
class _Keys:
    keys: Tensor
    step: int = 0
    site: int = 0


_ACTIVE: ContextVar[_Keys | None] = ContextVar("graphfed_dropout_keys", default=None)


@contextmanager
def keyed(keys: Tensor, step: int) -> Iterator[None]:
    """Draw the masks of this training step (``step``) from ``keys``."""
    token = _ACTIVE.set(_Keys(keys, step))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """``F.dropout``, or under ``keyed`` the same distribution from the client's key. On a
    sparse CSR matrix (``model.sparse_features``) only the stored values are dropped: the
    zeros a dense mask would drop stay zero, so the output has the dense dropout's law."""
    if not training or p == 0.0:
        return x
    if is_csr(x):
        return with_values(x, dropout(x.values(), p, training))
    keys = _ACTIVE.get()
    if keys is None:
        return F.dropout(x, p, training)
    keys.site += 1
    salt = keys.step * 1024 + keys.site
    return x * keyed_keep(keys.keys, salt, x.shape, p) / (1.0 - p)
