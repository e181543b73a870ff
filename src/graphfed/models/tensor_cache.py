"""What is derived from a tensor (a sparse matrix built from an edge list, a transposed
pattern), kept beside that tensor while it lives: a client's prepared edges and features serve
every step of every round, so what is built from them is built once.

A change is seen through the tensor's version counter, which in-place operations bump. Fused
optimizers (``torch.optim.Adam(fused=True)``) move parameters without bumping it: never key
anything on a tensor being trained."""

from __future__ import annotations

import weakref
from collections.abc import Callable

from torch import Tensor
from torch.utils.weak import WeakIdKeyDictionary

# tensor -> {key: (versions, weight's weak reference, value)}
DERIVED: WeakIdKeyDictionary = WeakIdKeyDictionary()


def derived(source: Tensor, weight: Tensor | None, key: tuple, build: Callable[[], object]):
    """``build()``, kept beside ``source`` while that tensor lives and neither it nor ``weight``
    (the same tensor) has changed. ``build`` must not return a view of ``source``: it would
    keep its own key alive for ever."""
    stamp = (source._version, None if weight is None else weight._version)
    held = DERIVED.setdefault(source, {}).get(key)
    if held is not None and held[0] == stamp and held[1]() is weight:
        return held[2]
    value = build()
    ref = (lambda: None) if weight is None else weakref.ref(weight)
    DERIVED[source][key] = (stamp, ref, value)
    return value
