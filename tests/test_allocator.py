"""The command line's allocator set-up: memory a step frees is there for the next step, not
faulted in from the OS again."""

from __future__ import annotations

import subprocess
import sys

import pytest

# a child process allocates, fills and frees 8 MiB ten times and prints the page faults that
# took, with the thresholds raised first or not
CHILD = """
import resource, sys, torch
from graphfed.allocator import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else False
torch.empty(2 << 20).fill_(1.0)  # the first allocation faults
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    torch.empty(2 << 20).fill_(1.0)
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> tuple[str, int]:
    out = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True,
                         check=True).stdout.split()
    return out[0], int(out[1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_freed_memory_is_reused_instead_of_faulted_in_again():
    kept, faults = _faults("keep")
    assert kept == "True"
    pages = 10 * (8 << 20) // 4096
    assert faults < pages // 4, faults  # about one allocation's pages in all (2,048 here)
    _, default = _faults("default")
    assert default > pages // 2, default  # glibc's defaults: most pages faulted in again
