"""How the batched engine lays its clients out on a device.

What is cheap differs: a CPU does every padded element's arithmetic itself and is fastest when
a pass's temporaries stay in its cache, while a GPU does the arithmetic in parallel and is slowed
by the kernels it is asked to launch, each of which costs the host several microseconds
(``benchmarks/round_ops.py`` counts them). One plan per kind of device keeps these choices in
one place; callers read it as ``plans.for_device(device)``, so a test or a benchmark can try a
GPU's plan on the CPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from graphfed.allocator import MMAP_THRESHOLD


@dataclass(frozen=True)
class DevicePlan:
    """``joined``: graph-level clients concatenated unpadded, every linear layer one grouped
    product (``training.joined``; on CUDA, float32 ``grouped_mm`` loops over the clients with
    a host read of their offsets); in evaluation, personalised graph-level clients are then
    scored by a plain pass each, which spreads no bias over joined rows. ``size_spread``: the
    most a padded group's largest client may exceed its smallest (``grouping.size_groups``).
    ``pass_macs``: what one more group's passes cost, as the multiply-adds of padded rows
    (``grouping.row_macs``): clients are split into more groups where that saves more padding.
    ``group_bytes``: the most bytes a padded group's widest activation may take
    (``grouping.group_rows``): on a CPU a larger one streams through memory, and beyond the
    allocator's threshold (``graphfed.allocator``) its pages are faulted in anew every step.
    ``hash_elements``: elements a keyed dropout mask hashes at once across a step's clients
    (None: the whole mask in one pass)."""

    joined: bool
    size_spread: float
    pass_macs: float
    group_bytes: float
    hash_elements: int | None


# on this project's 2-core machine one more padded pass of Cora's ten clients cost about 1 ms,
# as did 3e7 multiply-adds of padded rows (benchmarks/round_time.py); a round of 1,000 CSBM
# clients of 1,000 nodes took 2.6 s in one group of a million rows, 1.1-1.2 s in groups whose
# 64-wide activations stayed within the allocator's mmap threshold (benchmarks/scale.py)
CPU_PLAN = DevicePlan(joined=True, size_spread=2.0, pass_macs=3e7,
                      group_bytes=MMAP_THRESHOLD, hash_elements=1 << 16)
# a GPU pads rather than split a round into more passes; the spread still bounds the memory
# one skewed client can make the others pad to
ACCELERATOR_PLAN = DevicePlan(joined=False, size_spread=32.0, pass_macs=math.inf,
                              group_bytes=math.inf, hash_elements=None)


def for_device(device: torch.device | str) -> DevicePlan:
    """The plan for clients computing on ``device``."""
    return CPU_PLAN if torch.device(device).type == "cpu" else ACCELERATOR_PLAN
