"""The ServerApp: graphfed's run loop inside Flower, its clients reached through the Flower
transport (``runtime/flower.py``); the entry point a SuperLink runs for a submitted run."""

from __future__ import annotations

import json
from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp

from graphfed.config import ExperimentConfig, build_config
from graphfed.experiment import execute
from graphfed.runtime.flower import FlowerRuntime


def serve(grid: Grid, config: ExperimentConfig, run_dir: Path, progress: bool,
          owner_keys: dict[int, str] | None = None) -> dict:
    """The whole experiment, driven from inside a ServerApp: graphfed's own run loop with
    clients reached through ``grid``. With ``owner_keys`` (client id -> its owner's public
    key) a node is client i only if it proves it holds owner i's private key."""
    config_text = json.dumps(config.to_dict(), sort_keys=True)
    return execute(config, run_dir, None, progress, resume=False,
                   make_runtime=lambda server, cfg, seed, data: FlowerRuntime(
                       server, grid, cfg.flower, cfg.num_clients, cfg.client_fraction, seed,
                       config_text, data.partition_id, owner_keys))


app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Deployment entry point: the run config carries the experiment and its run directory."""
    config = build_config(json.loads(str(context.run_config["config"])))
    keys = {int(c): key for c, key in json.loads(str(context.run_config["owner-keys"])).items()}
    serve(grid, config, Path(str(context.run_config["run-dir"])), progress=False,
          owner_keys=keys)
