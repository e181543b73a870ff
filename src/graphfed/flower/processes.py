"""The processes a federation's parties run: an owner's SuperNode that rejoins after a crash,
and ending every process a command started (whole process groups, and the groups their
descendants moved to)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from graphfed.errors import GraphfedError
from graphfed.flower.deployment import tool_env

# Flower counts a SuperNode online until 2 heartbeats of 30 s are missed (flwr.common.constant:
# HEARTBEAT_PATIENCE x HEARTBEAT_DEFAULT_INTERVAL) and refuses to activate a node it counts online
# with the same error as an unregistered key; past this window a refusal means the key
REJOIN_WINDOW = 75.0
REJOIN_PAUSE = 5.0
ACTIVATED = "SuperNode ID:"  # flower-supernode's log line once the SuperLink activated it


def session_marker(key: Path) -> Path:
    """Present while a SuperNode of ``key`` may be counted online by the SuperLink: written
    when it is activated, removed once it exits having signed off (not killed)."""
    return Path(key).with_name(Path(key).name + ".session")


def run_supernode(command: list[str], superlink: str, key: Path, echo: Callable[[str], None]
                  ) -> int:
    """Run an owner's ``flower-supernode``, passing its log to ``echo``; its exit code.

    A node whose previous run ended without signing off (killed, crashed, machine lost) is still
    online for the SuperLink for up to a minute, which refuses it exactly as an unregistered key:
    then it is started again every few seconds until that window has passed, and only a refusal
    after it (or one with no such previous run) is reported as an unregistered key. SIGTERM and
    SIGHUP reach the node as a clean stop, so it signs off."""
    from graphfed.flower.preflight import ACTIVATION_REFUSED, refused_key

    marker = session_marker(key)
    stale = marker.exists()
    first_refusal: float | None = None
    while True:
        refused, code = _supernode_once(command, marker, echo, ACTIVATION_REFUSED)
        if not refused:
            return code
        now = time.monotonic()
        if not stale or (first_refusal is not None and now - first_refusal > REJOIN_WINDOW):
            _forget(marker)
            raise GraphfedError(refused_key(superlink, key))
        if first_refusal is None:
            first_refusal = now
            echo(f"graphfed: the SuperLink at {superlink} refused this node; this owner's "
                 f"previous SuperNode stopped without signing off and is counted online there "
                 f"for up to {REJOIN_WINDOW - 15:.0f} s: retrying every {REJOIN_PAUSE:.0f} s for "
                 f"up to {REJOIN_WINDOW:.0f} s\n")
        time.sleep(REJOIN_PAUSE)


def _supernode_once(command: list[str], marker: Path, echo: Callable[[str], None],
                    refusal: str) -> tuple[bool, int]:
    """One ``flower-supernode`` process: (refused activation, exit code)."""
    refused = False
    with subprocess.Popen(command, env=tool_env(), stdout=subprocess.PIPE, start_new_session=True,
                          stderr=subprocess.STDOUT, text=True) as process, \
            _forwarding_signals(process):
        assert process.stdout is not None
        for line in process.stdout:  # Flower's own log, passed on as it comes
            echo(line)
            if ACTIVATED in line:
                _write_marker(marker)
            if refusal in line:  # it gives up; its helpers may keep the pipe open
                refused = True
                end_groups([process], 10.0)
                break
        process.wait()
    if process.returncode >= 0 and not refused:  # it exited itself, so it signed off
        _forget(marker)
    return refused, process.returncode


@contextmanager
def _forwarding_signals(process: subprocess.Popen) -> Iterator[None]:
    """While ``process`` runs, SIGTERM/SIGHUP/SIGINT to this process become a SIGTERM to its
    group (its own session): Flower then deactivates the node and ends its helpers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    signals = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    previous = {s: signal.signal(s, lambda *_: _signal_group(process.pid, signal.SIGTERM))
                for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _signal_group(group: int, sig: int) -> None:
    """``sig`` to process group ``group`` (a process started in a session of its own leads the
    group of its pid)."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def end_groups(processes: list[subprocess.Popen], grace: float) -> None:
    """SIGTERM to each process's group, SIGKILL to what is still there after ``grace`` seconds
    (at once when 0). Whole groups are signalled, never only their leaders, and so are the
    groups their descendants moved to (Flower starts a SuperLink's SuperExec in a session of
    its own)."""
    groups = {p.pid for p in processes}
    groups |= {group for p in processes for group in descendants(p.pid).values()}
    if grace > 0:
        for group in groups:
            _signal_group(group, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(_group_alive(g, processes) for g in groups):
            time.sleep(0.2)
    for group in groups:
        _signal_group(group, signal.SIGKILL)
    for process in processes:
        process.wait()


def descendants(pid: int) -> dict[int, int]:
    """``pid``'s live descendants (pid -> process group), read from /proc; empty where there is
    no /proc (then only the leaders' own groups are signalled)."""
    proc = Path("/proc")
    table: dict[int, tuple[int, int]] = {}
    for entry in proc.iterdir() if proc.is_dir() else ():
        with suppress(OSError, ValueError, IndexError):
            state, ppid, pgid = (entry / "stat").read_text().rsplit(")", 1)[1].split()[:3]
            if state != "Z":
                table[int(entry.name)] = (int(ppid), int(pgid))
    found: dict[int, int] = {}
    frontier = [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, pgid) in table.items():
            if ppid == parent and child not in found:
                found[child] = pgid
                frontier.append(child)
    return found


def _group_alive(group: int, processes: list[subprocess.Popen]) -> bool:
    for process in processes:
        process.poll()  # reap the leaders: a zombie would count as alive
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _write_marker(marker: Path) -> None:
    with suppress(OSError):  # a read-only key folder: a refusal is then reported at once
        marker.write_text(f"{os.getpid()}\n")


def _forget(marker: Path) -> None:
    with suppress(OSError):
        marker.unlink(missing_ok=True)
