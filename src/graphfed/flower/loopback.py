"""A whole federation on this machine (loopback): credentials, one partition file per owner, a
SuperLink and one SuperNode per owner as separate processes, TLS and node authentication on.

It is the scripted recipe behind ``graphfed federation loopback`` and the deployment tests. On
real machines the same parties run the same commands (``superlink_command``,
``supernode_command``, ``register_node``) separately, as the README's walk-through shows.
"""

from __future__ import annotations

import os
import signal
import subprocess
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

READY = "Starting Flower SuperExec"  # the SuperLink's log line once it accepts runs


class LoopbackFederation:
    """Start with ``with LoopbackFederation(config, root) as fed:``; every process it started
    (and every process those spawned) ends when the block does."""

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

    def __enter__(self) -> LoopbackFederation:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        require_flwr()
        owners = self.config.num_clients
        self.root.mkdir(parents=True, exist_ok=True)
        self.say(f"credentials: a CA, the SuperLink's TLS certificate, {owners} owner key pairs")
        self.creds = make_credentials(self.root / "creds", owners)
        self.say(f"owner files: one partition file per owner in {self.root / 'owners'}")
        self.files = export_partition(self.config, self.config.run_seeds[0],
                                      self.root / "owners")
        self.say(f"SuperLink: starting on {self.address} (log: {self.log_path('superlink')})")
        self.launch("superlink", superlink_command(self.creds, port=self.port))
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

    def launch(self, name: str, command: list[str]) -> subprocess.Popen:
        """``command`` in its own process group, logging to ``<root>/<name>.log``."""
        process = subprocess.Popen(command, stdout=self.log_path(name).open("w"),
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   env=tool_env())
        self.processes[name] = process
        return process

    def log_path(self, name: str) -> Path:
        return self.root / f"{name}.log"

    def _wait_for_superlink(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        log, process = self.log_path("superlink"), self.processes["superlink"]
        while READY not in log.read_text():
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
        """End one party (and what it spawned): SIGTERM, then SIGKILL after 20 s."""
        process = self.processes[name]
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()

    def stop(self) -> None:
        for name in reversed(list(self.processes)):  # nodes first, then the SuperLink
            self.kill(name)
