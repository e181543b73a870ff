"""``runtime=flower-sim``: the experiment on Flower's simulation engine (Ray), one virtual
SuperNode per client with ``flower.client_cpus`` / ``flower.client_gpus`` each."""

from __future__ import annotations

from pathlib import Path

from flwr.app import Context
from flwr.serverapp import Grid, ServerApp
from flwr.simulation import run_simulation

from graphfed.config import ExperimentConfig
from graphfed.flower.client_app import app as client_app
from graphfed.flower.server_app import serve


def run_simulated(config: ExperimentConfig, run_dir: Path, progress: bool) -> dict:
    """Run every seed of ``config`` into ``run_dir`` on the simulation engine; the summary."""
    outcome: dict = {}
    server_app = ServerApp()

    @server_app.main()
    def main(grid: Grid, context: Context) -> None:
        try:
            outcome["summary"] = serve(grid, config, run_dir, progress)
        except BaseException as e:  # re-raised in the caller's thread, with its own type
            outcome["error"] = e

    resources = {"num_cpus": config.flower.client_cpus, "num_gpus": config.flower.client_gpus}
    run_simulation(server_app, client_app, num_supernodes=config.num_clients,
                   backend_config={"client_resources": resources,
                                   "init_args": {"log_to_driver": False}})
    if "error" in outcome:
        raise outcome["error"]
    if "summary" not in outcome:
        raise RuntimeError("Flower's simulation engine stopped before the run finished "
                           "(see its log above)")
    return outcome["summary"]
