"""Dropout whose masks can come from per-client keys instead of the global RNG.

The batched engine trains many clients in one vmapped pass, where the global RNG would give a
client masks that depend on who trains beside it. Under ``keyed(keys)`` every ``dropout`` call
draws its mask from a counter-based hash of (the client's key, the call's salt, the element's
index): a client's masks depend on its key alone, and are the same on every device. Outside
that context ``dropout`` draws from the global RNG, as ``F.dropout`` does, but compares uniform
numbers with p instead of drawing Bernoulli variables: the same law (each element kept with
probability 1 - p and scaled by 1 / (1 - p)), another stream, in about a third of the time on the
CPU, where PyTorch's Bernoulli sampler costs about 10 ns an element.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import NamedTuple

import torch
from torch import Tensor

from graphfed.models.rows import Rows
from graphfed.models.sparse import PaddedCsr, is_csr, with_values

MASK32 = 0xFFFFFFFF


def _int32(value: int) -> int:
    """A 32-bit constant as the signed value an int32 tensor holds."""
    return value - (1 << 32) if value >= 1 << 31 else value


GOLDEN, MIX1, MIX2, SALT = (_int32(c) for c in (0x9E3779B9, 0x85EBCA6B, 0xC2B2AE35, 0x27D4EB2F))


def _fmix32(h: Tensor) -> Tensor:
    """MurmurHash3's 32-bit finaliser (a bijection) on int32 tensors, in place: multiplications
    wrap, and each right shift is masked into a logical one. In place because the masks of a
    batched step hash tens of millions of elements: every pass saved is an allocation saved."""
    h ^= (h >> 16) & 0xFFFF
    h *= MIX1
    h ^= (h >> 13) & 0x7FFFF
    h *= MIX2
    h ^= (h >> 16) & 0xFFFF
    return h


def keyed_keep(key: Tensor, salt: int, shape: torch.Size, p: float,
               chunk: int | None = None) -> Tensor:
    """A keep-mask (each element kept with probability 1 - p) for ``shape`` from ``key`` (an
    int32 tensor, a per-client scalar under vmap) and ``salt`` (which call this is): element
    i's 16 bits of the hash of (key, salt, i // 2) against p * 2**16 (``keyed_keep_at``), so one
    hash serves two elements. Hashed ``chunk`` elements a client at a time (None: all at once),
    so that on a CPU the hash's temporaries stay in cache instead of streaming through memory
    a dozen times; the bits do not depend on the chunking."""
    count = shape.numel()
    pairs = (count + 1) // 2
    size = max(pairs, 1) if chunk is None else max(chunk // 2, 1)  # pairs of elements a chunk
    threshold, base = _threshold(p), _base(key, salt)
    masks = []
    for start in range(0, pairs, size):
        counters = _counters(start, min(start + size, pairs), key.device)
        masks.append(_pair_bits(_fmix32(counters + base), threshold))
    keep = masks[0] if len(masks) == 1 else torch.cat(masks)
    return keep[:count].view(shape)


_COUNTERS: dict[torch.device, Tensor] = {}
CACHED_COUNTERS = 1 << 22  # 16 MiB of int32 a device at most


def _counters(start: int, end: int, device: torch.device) -> Tensor:
    """The hash counters ``i * GOLDEN`` (int32, wrapping) of pairs ``start`` to ``end``: a
    view of one cached run a device, grown as needed up to ``CACHED_COUNTERS``, so a mask
    costs no arange and no product for them (two launches of a dozen on a GPU)."""
    if end > CACHED_COUNTERS:
        return torch.arange(start, end, dtype=torch.int32, device=device) * GOLDEN
    run = _COUNTERS.get(device)
    if run is None or run.numel() < end:
        size = min(CACHED_COUNTERS, max(end, 2 * (0 if run is None else run.numel())))
        with torch.inference_mode(False), torch.no_grad():
            run = torch.arange(size, dtype=torch.int32, device=device) * GOLDEN
        _COUNTERS[device] = run
    return run[start:end]


def _threshold(p: float) -> int:
    """p on the 16-bit scale the hashes are compared on (exact for p = k / 2**16: 0.5, 0.25)."""
    return round(p * (1 << 16))


def _base(key: Tensor, salt: int) -> Tensor:
    """The hash's per-call offset, added to every pair index: the key plus the salt's own
    hash, so a call costs the clients' keys one addition on their device rather than a hash.
    Keys are seeds (hashes already), and the finaliser mixes the sum of offset and index."""
    return key + _salt_offset(salt)


@functools.lru_cache(maxsize=1 << 14)
def _salt_offset(salt: int) -> int:
    """``salt`` hashed on the host, as a signed 32-bit value (computed once per salt)."""
    return int(_fmix32(torch.tensor(_int32((salt * SALT) & MASK32), dtype=torch.int32)))


class Positions(NamedTuple):
    """Flat element positions prepared for keyed hashing: ``index`` itself (int64, to gather
    and scatter with), the counter of each one's pair (``(index // 2) * GOLDEN``, int32) and
    the shift that selects its half of the pair's hash (0 or 16). Prepared once where the
    same positions are hashed every step (the features' non-zeros)."""

    index: Tensor
    counters: Tensor
    shifts: Tensor

    @classmethod
    def of(cls, index: Tensor) -> Positions:
        small = index.to(torch.int32)
        return cls(index, (small >> 1) * GOLDEN, (small & 1) * 16)


def keyed_keep_at(key: Tensor, salt: int, positions: Positions, p: float) -> Tensor:
    """``keyed_keep``'s bits at the flat element ``positions`` only: element i takes the low
    16 bits of its pair's hash when i is even, the high 16 when it is odd."""
    return _bits_at(_base(key, salt), positions, p)


def _bits_at(base: Tensor, positions: Positions, p: float) -> Tensor:
    """The keep bits of the elements at ``positions`` whose hashes start from ``base`` (one
    offset, or one per element, broadcast)."""
    h = _fmix32(positions.counters + base)
    h >>= positions.shifts
    h &= 0xFFFF
    return h >= _threshold(p)


def keyed_keep_rows(keys: Tensor, salt: int, rows: Rows, shape: torch.Size, p: float
                    ) -> Tensor:
    """The keep-mask of a joined tensor (``shape``, its rows owned as ``rows`` says): each
    client's rows get, bit for bit, the mask ``keyed_keep(keys[k], salt, ...)`` gives the first
    rows of that client's own tensor, so the joined and the padded layouts drop the same
    elements. With an even row width a row holds whole pairs and one hash serves two
    elements, as there."""
    width = shape[1:].numel()
    base = _base(keys, salt)[rows.owner].view(-1, 1)
    local = rows.local.to(torch.int32).view(-1, 1)
    if width % 2:
        index = local * width + torch.arange(width, dtype=torch.int32, device=keys.device)
        return _bits_at(base, Positions.of(index), p).view(shape)
    half = width // 2
    # (local * half + j) * GOLDEN + base, the row's part summed once (int32 wraps alike)
    first = local * (half * GOLDEN) + base
    h = _fmix32(first + _counters(0, half, keys.device))
    return _pair_bits(h, _threshold(p)).view(shape)


@functools.cache
def vmap_views_dtypes() -> bool:
    """Whether this PyTorch's vmap can read an int32 tensor's bytes as int16 (``view(dtype)``):
    2.13's can; 2.11's cannot ("Batching rule not implemented for aten::view.dtype"), which
    failed every batched step with dropout on a GPU machine's torch."""
    try:
        torch.func.vmap(lambda t: t.view(torch.int16))(torch.zeros(1, 1, dtype=torch.int32))
    except RuntimeError:
        return False
    return True


def _pair_bits(h: Tensor, threshold: int) -> Tensor:
    """Each 32-bit hash of ``h`` (``[..., n]``, consumed) as the keep bits of its two
    elements (``[..., 2n]``): its low 16 bits against ``threshold`` for the first, its high 16
    for the second. Read in place as 16-bit halves (the low one first in memory on a
    little-endian machine), each turned from unsigned to signed order by flipping its top bit:
    two passes where masking and shifting each half take five and a stack."""
    if threshold >= 1 << 16:
        return torch.zeros(*h.shape[:-1], 2 * h.size(-1), dtype=torch.bool, device=h.device)
    if not vmap_views_dtypes():  # the same bits, each half masked and shifted out instead
        return torch.stack(((h & 0xFFFF) >= threshold, ((h >> 16) & 0xFFFF) >= threshold),
                           -1).flatten(-2)
    h ^= _int32(0x80008000)
    halves = h.view(torch.int16)
    if sys.byteorder == "big":
        halves = halves.view(*h.shape, 2).flip(-1).flatten(-2)
    return halves >= threshold - (1 << 15)


@dataclass
class _Keys:
    keys: Tensor
    step: int = 0
    site: int = 0
    feature_nonzeros: Positions | None = None
    chunk: int | None = None
    rows: dict[int, Rows] | None = None


_ACTIVE: ContextVar[_Keys | None] = ContextVar("graphfed_dropout_keys", default=None)


@contextmanager
def keyed(keys: Tensor, step: int, feature_nonzeros: Positions | None = None,
          chunk: int | None = None, rows: dict[int, Rows] | None = None) -> Iterator[None]:
    """Draw the masks of this training step (``step``) from ``keys``. ``feature_nonzeros``:
    the flat positions of the input features' non-zeros (any padding pointing at a zero), so
    the dropout on the features hashes those positions only. ``chunk``: the elements of a
    mask hashed at once a client (``keyed_keep``; the masks do not depend on it). ``rows``:
    the joined layout (no vmap; ``keys`` holds every client's key), the owners of a joined
    tensor's rows by its row count."""
    token = _ACTIVE.set(_Keys(keys, step, feature_nonzeros=feature_nonzeros, chunk=chunk,
                              rows=rows))
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def dropout(x: Tensor | PaddedCsr, p: float, training: bool, on_features: bool = False
            ) -> Tensor | PaddedCsr:
    """``F.dropout``'s law from the global RNG, or under ``keyed`` from the client's key. On
    sparse features (a CSR matrix, ``model.sparse_features``, or the batched engine's
    ``PaddedCsr``) only the stored values are dropped: the zeros a dense mask would drop stay
    zero, so the output has the dense dropout's law; under ``keyed`` a ``PaddedCsr``'s values
    are hashed at their dense positions, so its mask is the dense keyed mask's bit for bit.
    ``on_features``: dense ``x`` is the input features, whose non-zeros ``keyed`` may know;
    then only they are hashed, with the same result."""
    if not training or p == 0.0:
        return x
    keys = _ACTIVE.get()
    if isinstance(x, PaddedCsr):
        if keys is None:
            return x.with_values(dropout(x.values, p, training))
        return x.with_values(x.values * keyed_keep_at(keys.keys, _next_salt(keys),
                                                 Positions.of(x.positions), p) / (1.0 - p))
    if is_csr(x):
        return with_values(x, dropout(x.values(), p, training))
    if keys is None:
        return x * (torch.rand_like(x) >= p) / (1.0 - p)
    salt = _next_salt(keys)
    if keys.rows is not None:
        return x * keyed_keep_rows(keys.keys, salt, keys.rows[x.size(0)], x.shape, p) / (1.0 - p)
    if on_features and keys.feature_nonzeros is not None:
        return _dropout_at(x, keys.keys, salt, keys.feature_nonzeros, p)
    # only the mask is chunked: a product of slices would make autograd's backward write a
    # whole-size gradient per slice
    return x * keyed_keep(keys.keys, salt, x.shape, p, keys.chunk) / (1.0 - p)


def _next_salt(keys: _Keys) -> int:
    """The salt of this step's next dropout call: calls draw independent masks."""
    keys.site += 1
    return keys.step * 1024 + keys.site


def _dropout_at(x: Tensor, key: Tensor, salt: int, positions: Positions, p: float) -> Tensor:
    """The keyed dropout of ``x`` where every element outside ``positions`` is zero: the mask
    hashed at ``positions`` only (elsewhere it multiplies zeros, so its value is moot). Only
    the non-zeros are multiplied, then put in place into zeros: no dense mask, no dense product,
    no copy of the output (an out-of-place scatter under vmap copies it; ``index_put_``, unlike
    ``scatter_``, has a batching rule); the same values bit for bit."""
    keep = keyed_keep_at(key, salt, positions, p)
    flat = x.reshape(-1)
    kept = flat.gather(0, positions.index) * keep / (1.0 - p)
    return torch.zeros_like(flat).index_put_((positions.index,), kept).view(x.shape)
