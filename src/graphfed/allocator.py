"""Keep freed memory for the next allocation instead of handing it back to the OS.

By default glibc serves a large allocation with fresh pages from the OS (above its mmap
threshold, 128 KiB to start with) and returns free memory at the top of its heap (above its trim
threshold): a training step that frees tens of megabytes of activations and allocates them again
at the next step then faults every page in anew. On this project's CPU machine a batched
PROTEINS round (one joined pass of 15k nodes) took 1.27-1.42 times a centralized epoch with
glibc's thresholds and 1.07-1.08 times with those below (``benchmarks/round_time.py`` with and
without ``--default-allocator``). ``keep_freed_memory`` sets both thresholds once for the
process: mmap to glibc's 64-bit maximum (32 MiB: larger tensors still go back to the OS when
freed), trim to 256 MiB (at most that much free memory is held back). The ``graphfed`` command
calls it; a program using graphfed as a library may call it once itself.
"""

from __future__ import annotations

import ctypes
import sys

# mallopt's parameter numbers (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 256 << 20


def keep_freed_memory() -> bool:
    """Raise this process's glibc thresholds (see the module); False where its C library is
    not glibc or refuses them (it is then left as it was)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the C library this process already runs on
    except (OSError, AttributeError):
        return False
    return (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
            and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1)
