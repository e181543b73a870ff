"""Submitting a graphfed run to a SuperLink and following it to one agreed end: the run
directory's ``flower-run.json`` and the SuperLink never tell two stories, and a run graphfed
gives up on is stopped on the SuperLink before graphfed says so."""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

from graphfed.errors import GraphfedError
from graphfed.flower.deployment import APP_PYPROJECT, CONNECTION, flower_home, tool


def submit_run(config, run_dir: Path, owner_keys: dict[int, str]) -> dict:
    """Submit the experiment to ``config.flower.superlink`` and wait for it; the summary.

    The ServerApp writes the run directory on the SuperLink's machine: on one machine (or a
    shared disk) it is ``run_dir`` itself. The owners' public keys travel in the run config,
    so the ServerApp checks each node's identity without reading the operator's files. The
    directory's ``flower-run.json`` names the Flower run and how it ended; a run graphfed gives
    up on (``flower.run_timeout``, an interrupt) is stopped on the SuperLink first."""
    options = config.flower
    app = run_dir / "flower-app"
    app.mkdir()
    (app / "pyproject.toml").write_text(APP_PYPROJECT)
    keys = json.dumps({str(c): key for c, key in owner_keys.items()})
    (run_dir / "run-config.toml").write_text(
        f"config = {json.dumps(json.dumps(config.to_dict()))}\n"
        f"run-dir = {json.dumps(str(run_dir.resolve()))}\n"
        f"owner-keys = {json.dumps(keys)}\n")
    env = flower_home(run_dir / "flwr-home", options.superlink,
                      Path(options.root_certificates) if options.root_certificates else None)
    run_id = follow_run([tool("flwr"), "run", str(app), CONNECTION, "--run-config",
                         str(run_dir / "run-config.toml"), "--stream"], env, run_dir,
                        options.run_timeout, options.superlink)
    summary = run_dir / "summary.json"
    if not summary.is_file():
        log = run_dir / "flower.log"
        tail = "\n".join(log.read_text().strip().splitlines()[-15:])
        record_run_state(run_dir, run_id, "failed", "the ServerApp ended without a summary")
        raise GraphfedError(f"the Flower run ended without a summary in {run_dir} (log: "
                            f"{log}):\n{tail}")
    record_run_state(run_dir, run_id, "finished")
    return json.loads(summary.read_text())


RUN_STATE = "flower-run.json"  # in the run directory: the Flower run's id and how it ended
STARTED = re.compile(r"Successfully started run (\d+)")


def record_run_state(run_dir: Path, run_id: int | None, state: str, detail: str = "") -> None:
    """Write what graphfed knows of the Flower run into its run directory, so the directory and
    the SuperLink never tell two stories (``running``, ``finished``, ``stopped``, ``lost``,
    ``failed``)."""
    (run_dir / RUN_STATE).write_text(json.dumps(
        {"flower_run_id": run_id, "state": state, "detail": detail}, indent=1) + "\n")


def follow_run(command: list[str], env: dict[str, str], run_dir: Path, timeout: float | None,
               superlink: str) -> int | None:
    """Run ``flwr run --stream`` (its output into ``run_dir/flower.log`` as it comes) until it
    ends; the Flower run id (None if its output never named one). Past ``timeout``, or when
    this process is interrupted, the Flower run is stopped on the SuperLink before graphfed
    reports it, so it cannot go on writing."""
    log = run_dir / "flower.log"
    run_id: int | None = None
    deadline = None if timeout is None else time.monotonic() + timeout
    with log.open("w") as out, subprocess.Popen(command, env=env, stdout=out,
                                                stderr=subprocess.STDOUT) as process:
        try:
            while process.poll() is None:
                if run_id is None and (found := STARTED.search(log.read_text())):
                    run_id = int(found.group(1))
                    record_run_state(run_dir, run_id, "running")
                if deadline is not None and time.monotonic() > deadline:
                    reason = f"it ran past flower.run_timeout={timeout:g}s"
                    raise GraphfedError(_give_up(process, run_id, env, run_dir, reason))
                time.sleep(0.5)
        except BaseException as e:
            if process.poll() is None:  # interrupted (Ctrl-C, SIGTERM): the same clean stop
                _give_up(process, run_id, env, run_dir, f"graphfed was interrupted ({e!r})")
            raise
    if run_id is None and (found := STARTED.search(log.read_text())):
        run_id = int(found.group(1))
    if process.returncode != 0:
        tail = _tail(log)
        if run_id is None:
            record_run_state(run_dir, None, "failed", tail)
            raise GraphfedError(f"flwr run failed (log: {log}):\n{tail}")
        detail = (f"the connection to the SuperLink at {superlink} was lost during Flower run "
                  f"{run_id} (did it stop or restart?). Its partial results are in {run_dir}. "
                  f"Once the SuperLink is back (the same command and --database file: it keeps "
                  f"the owners' registrations, and their SuperNodes reconnect by themselves), "
                  f"submit the run again; if `flwr ls` there still lists run {run_id} as "
                  f"running, stop it first with `flwr stop {run_id}`")
        record_run_state(run_dir, run_id, "lost", detail)
        raise GraphfedError(f"{detail} (log: {log}):\n{tail}")
    return run_id


def _give_up(process: subprocess.Popen, run_id: int | None, env: dict[str, str], run_dir: Path,
             reason: str) -> str:
    """End the local ``flwr run`` and stop the Flower run itself; what happened, in a line."""
    process.terminate()
    try:
        process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    if run_id is None:
        record_run_state(run_dir, None, "stopped", f"{reason}, before Flower named the run")
        return f"the Flower run did not start: {reason} (log: {run_dir / 'flower.log'})"
    stop = _flwr_quietly(["stop", str(run_id)], env)
    if stop is None or stop.returncode != 0:
        why = "no answer" if stop is None else (stop.stderr or stop.stdout).strip()
        detail = (f"{reason}; stopping Flower run {run_id} failed ({why}): stop it on the "
                  f"SuperLink with `flwr stop {run_id}` before trusting {run_dir}")
        record_run_state(run_dir, run_id, "failed", detail)
        return detail
    detail = (f"{reason}; graphfed stopped Flower run {run_id} on the SuperLink (partial results "
              f"in {run_dir})")
    record_run_state(run_dir, run_id, "stopped", detail)
    return detail


def _flwr_quietly(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess | None:
    try:
        return subprocess.run([tool("flwr"), *args, CONNECTION], env=env, capture_output=True,
                              text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return None


def _tail(log: Path, lines: int = 15) -> str:
    return "\n".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
