"""The command line's allocator set-up (``graphfed.allocator``): glibc takes the thresholds,
and elsewhere nothing is touched. Its effect, memory a step frees reused at the next step
instead of faulted in again, is measured by ``benchmarks/round_time.py`` (with and without
``--default-allocator``): page-fault counts of a small probe depend on the heap's layout too
much to assert."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from graphfed import allocator


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_glibc_takes_the_thresholds():
    # in a child process: the thresholds are the process's, not this test run's
    out = subprocess.run([sys.executable, "-c", "from graphfed.allocator import "
                          "keep_freed_memory; print(keep_freed_memory())"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "True"


def test_nothing_is_touched_outside_linux(monkeypatch):
    monkeypatch.setattr(allocator.sys, "platform", "darwin")
    monkeypatch.setattr(allocator.ctypes, "CDLL", lambda *a: pytest.fail("libc was opened"))
    assert allocator.keep_freed_memory() is False
