"""Parameters as plain named tensors, and how they move between devices.

The leaf every layer shares: mechanisms, the trainer, the protocol and the runtimes all pass
``Params`` and place them with ``move_tensors``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

Params = dict[str, Tensor]


def move_tensors(tree: Any, device: torch.device | str, copy: bool = False) -> Any:
    """``tree`` (tensors in nested dicts, lists and tuples) with every tensor detached and on
    ``device``; anything else is kept as it is. ``copy`` copies tensors already there too (what
    crosses the client/server boundary is never shared); without it, a client's state loaded
    from a checkpoint (on the CPU) goes back to where the client computes with it."""
    if isinstance(tree, Tensor):  # a copy of a tensor that records no graph needs no detach
        return (tree if copy and not tree.requires_grad else tree.detach()).to(device, copy=copy)
    if isinstance(tree, dict):
        return {k: move_tensors(v, device, copy) for k, v in tree.items()}
    if type(tree) in (list, tuple):
        return type(tree)(move_tensors(v, device, copy) for v in tree)
    return tree
