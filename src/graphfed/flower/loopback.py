"""A whole federation on this machine (loopback): credentials, one partition file per owner, a
SuperLink and one SuperNode per owner as separate processes, TLS and node authentication on.

It is the scripted recipe behind ``graphfed federation loopback`` and the deployment tests. On
real machines the same parties run the same commands (``superlink_command``,
``supernode_command``, ``register_node``) separately, as the README's walk-through shows.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from graphfed.config import ExperimentConfig, with_overrides
from graphfed.errors import GraphfedError
from graphfed.flower.deployment import (
    Credentials,
    make_credentials,
    register_node,
    superlink_command,
    supernode_command,
    tool_env,
)
from graphfed.flower.launch import require_flwr, run_on_flower
from graphfed.flower.owner import export_partition
from graphfed.flower.processes import end_groups

READY = "Starting Flower SuperExec"  # the SuperLink's log line once it accepts runs
GRACE = 20.0  # seconds a party has to end after SIGTERM before it is killed
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)  # SIGINT already raises KeyboardInterrupt


class LoopbackFederation:
    """Start with ``with LoopbackFederation(config, root) as fed:``; every process it started
    (and every process those spawned) ends when the block does, also when this process is sent
    SIGTERM or SIGHUP (in the main thread, they end the block as ``SystemExit(128 + signal)``).

    The SuperLink keeps its state (the owners' registrations, runs) in ``superlink-state.db``
    under ``root``, so a restarted SuperLink still admits the owners and their nodes rejoin."""

    def __init__(self, config: ExperimentConfig, root: Path, port: int = 9093,
                 node_port: int = 9400, start_timeout: float = 120.0,
                 say: Callable[[str], None] | None = None):
        self.config, self.root = config, Path(root)
        self.address = f"127.0.0.1:{port}"
        self.port, self.node_port, self.start_timeout = port, node_port, start_timeout
        self.processes: dict[str, subprocess.Popen] = {}
        self.creds: Credentials | None = None
        self.files: list[Path] = []
        self.say = say or (lambda line: None)  # each step, as it starts, for a watching operator
        self.database = self.root / "superlink-state.db"
        self.launches: dict[str, int] = {}  # how often each party was started
        self._handlers: dict[int, object] = {}

    def __enter__(self) -> LoopbackFederation:
        self._catch_stop_signals()
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def _catch_stop_signals(self) -> None:
        """SIGTERM/SIGHUP end the ``with`` block (so ``stop`` runs) instead of this process
        alone, which would leave the SuperLink and SuperNodes (own sessions) holding ports."""
        if threading.current_thread() is not threading.main_thread():
            return

        def end(signum: int, _frame: object) -> None:
            for sig in STOP_SIGNALS:  # a second signal must not cut the clean-up short
                signal.signal(sig, signal.SIG_IGN)
            self.say(f"{signal.Signals(signum).name}: stopping every process of the federation")
            raise SystemExit(128 + signum)

        self._handlers = {sig: signal.signal(sig, end) for sig in STOP_SIGNALS}

    def start(self) -> None:
        require_flwr()
        owners = self.config.num_clients
        self.root.mkdir(parents=True, exist_ok=True)
        self.say(f"credentials: a CA, the SuperLink's TLS certificate, {owners} owner key pairs")
        self.creds = make_credentials(self.root / "creds", owners, force=True)  # throwaway
        self.say(f"owner files: one partition file per owner in {self.root / 'owners'}")
        self.files = export_partition(self.config, self.config.run_seeds[0],
                                      self.root / "owners")
        self.say(f"SuperLink: starting on {self.address} (log: {self.log_path('superlink')})")
        self.launch("superlink", self.superlink_command())
        self._wait_for_superlink()
        self.say(f"SuperNodes: registering {owners} owners' public keys, starting their nodes")
        with ThreadPoolExecutor(min(owners, 8)) as pool:  # each is a short flwr CLI process
            list(pool.map(lambda i: register_node(self.creds.owner_public_key(i), self.address,
                                                  self.creds.ca, self.root / f"flwr-home-{i}"),
                          range(owners)))
        for i in range(owners):
            self.launch(f"node{i}", supernode_command(
                self.address, self.creds.ca, self.creds.owner_key(i), self.files[i],
                self.node_port + i))

    def superlink_command(self) -> list[str]:
        """The operator's SuperLink, its state in a file so that it survives a restart."""
        assert self.creds is not None, "start the federation first"
        return [*superlink_command(self.creds, port=self.port), "--database", str(self.database)]

    def launch(self, name: str, command: list[str]) -> subprocess.Popen:
        """``command`` in its own process group, logging to ``<root>/<name>.log`` (appended to,
        so a restarted party's log follows its first one)."""
        with self.log_path(name).open("a") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True, env=tool_env())
        self.processes[name] = process
        self.launches[name] = self.launches.get(name, 0) + 1
        return process

    def restart_superlink(self) -> None:
        """End the SuperLink (and the runs it hosts) and start it again on the same state."""
        self.kill("superlink")
        self.say(f"SuperLink: restarting on {self.address}")
        self.launch("superlink", self.superlink_command())
        self._wait_for_superlink()

    def log_path(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def _wait_for_superlink(self) -> None:
        """Until the newest SuperLink's log says it accepts runs (earlier ones' lines before)."""
        deadline = time.monotonic() + self.start_timeout
        log, process = self.log_path("superlink"), self.processes["superlink"]
        while log.read_text().count(READY) < self.launches.get("superlink", 0):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = "\n".join(log.read_text().strip().splitlines()[-10:])
                raise GraphfedError(f"the SuperLink did not start on {self.address}:\n{tail}")
            time.sleep(0.5)

    def run_config(self, config: ExperimentConfig | None = None) -> ExperimentConfig:
        """``config`` (default: the one the federation was built for) aimed at this federation."""
        assert self.creds is not None, "start the federation first"
        return with_overrides(config or self.config, {
            "runtime": "flower", "flower.superlink": self.address,
            "flower.root_certificates": str(self.creds.ca),
            "flower.owner_keys": str(self.creds.root)})

    def run(self, config: ExperimentConfig | None = None, out: Path | None = None,
            progress: bool = False) -> tuple[Path, dict]:
        self.say("run: submitted to the SuperLink; the ServerApp waits for every node to connect")
        return run_on_flower(self.run_config(config), out or self.root / "runs", progress)

    def kill(self, name: str) -> None:
        """End one party and what it spawned: SIGTERM, then SIGKILL after ``GRACE`` seconds."""
        end_groups([self.processes[name]], GRACE)

    def stop(self) -> None:
        """End every party at once (each gets ``GRACE`` seconds), then give the signals back."""
        try:
            end_groups(list(self.processes.values()), GRACE)
        finally:
            for sig, handler in self._handlers.items():
                signal.signal(sig, handler)
            self._handlers = {}

