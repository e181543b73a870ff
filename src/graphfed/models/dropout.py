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

MASK32 = 0xFFFFFFFF


def _fmix32(h: Tensor) -> Tensor:
    """MurmurHash3's 32-bit finaliser on int64 tensors holding 32-bit values (a bijection)."""
    h = h ^ (h >> 16)
    h = (h * 0x85EBCA6B) & MASK32
    h = h ^ (h >> 13)
    h = (h * 0xC2B2AE35) & MASK32
    return h ^ (h >> 16)


def keyed_uniform(key: Tensor, salt: int, shape: torch.Size, device: torch.device) -> Tensor:
    """Uniform [0, 1) numbers, one per element of ``shape``, from ``key`` (a 32-bit int64
    tensor, a per-client scalar under vmap) and ``salt`` (which call this is)."""
    base = _fmix32((key ^ (salt * 0x27D4EB2F)) & MASK32)
    index = torch.arange(shape.numel(), device=device, dtype=torch.int64).view(shape)
    h = _fmix32((index * 0x9E3779B1 + base) & MASK32)
    return (h >> 8).to(torch.float32) * 2.0 ** -24


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
    """``F.dropout``, or under ``keyed`` the same distribution from the client's key."""
    keys = _ACTIVE.get()
    if keys is None or not training or p == 0.0:
        return F.dropout(x, p, training)
    keys.site += 1
    salt = keys.step * 1024 + keys.site
    keep = keyed_uniform(keys.keys, salt, x.shape, x.device) >= p
    return x * keep / (1.0 - p)
