"""Launching a run on Flower: graphfed's server and client sides, unchanged, inside a Flower
ServerApp and ClientApp — on Flower's simulation engine (``runtime=flower-sim``) or on a SuperLink
with one SuperNode per data owner (``runtime=flower``, ``flower.submission``). Importing this
module does not import flwr."""

from __future__ import annotations

from pathlib import Path

from graphfed.build import federated_data
from graphfed.config import ExperimentConfig
from graphfed.errors import GraphfedError
from graphfed.run_files import new_run_dir


def require_flwr() -> None:
    """One readable error instead of an ImportError deep inside a run."""
    try:
        import flwr  # noqa: F401
    except ImportError:
        raise GraphfedError("this runtime needs Flower, which is not installed; install it with "
                            "pip install 'graphfed[flower]'") from None


def run_on_flower(config: ExperimentConfig, out: Path, progress: bool) -> tuple[Path, dict]:
    """Run ``config`` on its Flower runtime; same run directory and summary as in-process."""
    require_flwr()
    for seed in config.run_seeds:  # bad input fails here, and partitions are cached for clients
        federated_data(config, seed)
    if config.runtime == "flower-sim":
        from graphfed.flower.simulation import run_simulated

        run_dir = new_run_dir(config, out)
        return run_dir, run_simulated(config, run_dir, progress)
    from graphfed.flower.preflight import check_superlink
    from graphfed.flower.submission import submit_run
    from graphfed.runtime.identity import read_owner_keys

    options = config.flower  # before the run directory: a wrong path or CA leaves nothing
    keys = read_owner_keys(options.owner_keys, config.num_clients)
    check_superlink(options.superlink,
                    Path(options.root_certificates) if options.root_certificates else None)
    run_dir = new_run_dir(config, out)
    return run_dir, submit_run(config, run_dir, keys)
