"""Config -> federated data -> runtime -> results on disk, with checkpoints and exact resume.

A run directory holds ``config.yaml`` (resolved), one ``seed-<s>/`` folder per seed with
``metrics.jsonl`` (one line per round), ``checkpoint.pt`` and ``summary.json``, and a top-level
``summary.json`` with the final metrics (mean and std over seeds when there are several).

Checkpoints and summaries are written atomically, and a checkpoint carries the fingerprint of the
config and partition it was made by: a resume continues only from a checkpoint of its own run,
whose round ``metrics.jsonl`` records, and repairs only what it can prove (a torn last line,
rounds after the checkpoint's, which it runs again). A fresh run whose first seed fails before
anything was checkpointed leaves no run directory: there is nothing a resume could continue.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch

from graphfed.build import (
    attackers,
    build_algorithm,
    build_client,
    build_server,
    client_context,
    config_dataset,
    federated_data,
    prepare_global_test,
    resolve_device,
)
from graphfed.checkpoints import fingerprint, load_checkpoint, resumed_lines, save_checkpoint
from graphfed.config import ConfigError, ExperimentConfig, load_config, with_overrides
from graphfed.data.edges import edge_report
from graphfed.data.federated import FederatedData
from graphfed.data.heterogeneity import stored_card
from graphfed.evaluation import (
    LINK_FINAL,
    REGRESSION_FINAL,
    client_record,
    self_reported,
    summarise,
)
from graphfed.privacy import ledger
from graphfed.privacy.dp_fedavg import dp_release
from graphfed.progress import RoundProgress
from graphfed.protocol import Server
from graphfed.run_files import combine_seeds, new_run_dir
from graphfed.run_lock import run_dir_lock
from graphfed.runtime.base import RoundFailed, Runtime
from graphfed.runtime.simulation import SimulationRuntime
from graphfed.serialization import (
    WriteFailed,
    atomic_write,
    read_json,
    writing,
)
from graphfed.tensors import move_tensors
from graphfed.trackers import open_trackers
from graphfed.training import PreparedClient, Trainer

FINAL_KEYS = ("test_acc", "test_acc_std", "test_macro_f1", "test_loss", "val_acc",
              "global_test_acc", "global_test_macro_f1", "global_test_loss",
              "client_global_test_acc", "train_loss_deployed", "train_loss_deployed_std",
              "train_loss_deployed_var", "train_loss_deployed_entropy",
              "test_acc_var", "test_acc_entropy", "test_loss_var", "test_loss_entropy",
              "test_acc_pooled", "test_minority_acc", "test_minority_acc_pooled", "val_loss",
              "val_acc_pooled", "val_loss_pooled", "test_roc_auc", *REGRESSION_FINAL,
              *LINK_FINAL)
CHECKPOINT = "checkpoint.pt"
# a finished seed's state after its last round (a checkpoint's fields): what the run released,
# which ``graphfed audit`` rebuilds
FINAL = "final.pt"

log = logging.getLogger(__name__)


class RunInterrupted(KeyboardInterrupt):
    """The run was interrupted (Ctrl-C); ``run_dir`` keeps its checkpoints and finished seeds.
    Still a KeyboardInterrupt for callers that stop on one; the CLI says how to continue."""

    def __init__(self, run_dir: Path):
        super().__init__(f"interrupted; graphfed run --resume {run_dir} continues it from its "
                         "last checkpoint")
        self.run_dir = run_dir


class RunFailed(RoundFailed):
    """A seed's round failed for every client. ``resumable``: the run directory keeps a
    checkpoint or finished seed that ``--resume`` continues from; otherwise a resume would only
    start again, and the message says to fix the cause and run again."""

    def __init__(self, message: str, resumable: bool):
        super().__init__(message)
        self.resumable = resumable


@dataclass
class Federation:
    """Everything one seed of a run needs, built and placed on the device once."""

    config: ExperimentConfig
    seed: int
    data: FederatedData
    trainer: Trainer
    runtime: Runtime
    global_test: PreparedClient | None

    def _line(self, record, start: float) -> dict:
        line = {"round": record.round, "sampled": record.sampled, "answered": record.answered,
                "dropped": record.dropped, "bytes_up": record.bytes_up,
                "bytes_down": record.bytes_down, "train_loss": record.train_loss,
                "train_seconds": time.perf_counter() - start}
        if record.wire_bytes is not None:
            line["wire_bytes_up"], line["wire_bytes_down"] = record.wire_bytes
        server = self.runtime.server.round_metrics()
        if server:
            line["server"] = server
        releases = self.runtime.server.take_releases()
        if releases:
            line[ledger.LINE_KEY] = [r.to_dict() for r in releases]
        return line

    def setup(self) -> dict | None:
        """The algorithm's exchange before round 1 (round 0 of metrics.jsonl), if any."""
        start = time.perf_counter()
        record = self.runtime.setup_round()
        return None if record is None else self._line(record, start)

    def fit_round(self, rnd: int) -> dict:
        start = time.perf_counter()
        return self._line(self.runtime.fit_round(rnd), start)

    def evaluate(self, rnd: int) -> dict:
        start = time.perf_counter()
        results = self.runtime.evaluate_round(rnd)
        per_client = [client_record(client, results[client]) for client in sorted(results)]
        out = summarise(per_client)
        params = self.runtime.server.global_params()
        if params is not None and self.global_test is not None:
            on_device = move_tensors(params, self.trainer.device)  # the server's are on the CPU
            g = self.trainer.evaluate(on_device, self.global_test, ("test",))["test"]
            out.update(global_test_acc=g["acc"], global_test_macro_f1=g["macro_f1"],
                       global_test_loss=g["loss"])
        out["clients"] = per_client
        if self.runtime.evaluation_dropped:  # replies that failed the boundary's checks
            out["evaluation_dropped"] = self.runtime.evaluation_dropped
        out["eval_seconds"] = time.perf_counter() - start
        return out

    @cached_property
    def fingerprint(self) -> dict:
        """What a checkpoint of this seed must have been made by (``checkpoints.fingerprint``)."""
        return fingerprint(self.config, self.seed, self.data)


RuntimeFactory = Callable[[Server, ExperimentConfig, int, FederatedData], Runtime]


def build_federation(config: ExperimentConfig, seed: int,
                     make_runtime: RuntimeFactory | None = None,
                     data: FederatedData | None = None) -> Federation:
    """One seed's federation; in-process clients unless ``make_runtime`` supplies a runtime
    whose clients live elsewhere (Flower); on ``data`` in place of the config's partition
    (``graphfed audit``'s shadow models train on held-out splits)."""
    data = federated_data(config, seed) if data is None else data
    algorithm, trainer, setup = build_algorithm(config, seed, data.level, data.num_features,
                                                data.num_classes, data.num_clients,
                                                resolve_device(config.device))
    global_test = prepare_global_test(config, trainer, data.global_test)
    server = build_server(config, algorithm, trainer, setup, data)
    if make_runtime is not None:
        runtime = make_runtime(server, config, seed, data)
        return Federation(config, seed, data, trainer, runtime, global_test)
    contexts = [client_context(config, trainer, i, c, global_test)
                for i, c in enumerate(data.clients)]
    runtime = SimulationRuntime(server, build_client(config, seed, algorithm, setup),
                                contexts, config.client_fraction, seed,
                                batched=config.engine == "batched", record=config.cuda_graphs)
    return Federation(config, seed, data, trainer, runtime, global_test)


# ---------------------------------------------------------------- one seed

def _write_json(path: Path, data: dict) -> None:
    atomic_write(path, json.dumps(data, indent=2).encode())


def run_seed(fed: Federation, seed_dir: Path, progress: RoundProgress | None = None,
             resume: bool = False) -> dict:
    """Train one seed to the end, checkpointing every ``checkpoint_every`` rounds; with
    ``resume``, continue from the seed's checkpoint when it has one."""
    config = fed.config
    seed_dir.mkdir(parents=True, exist_ok=True)
    metrics_path, ckpt_path = seed_dir / "metrics.jsonl", seed_dir / CHECKPOINT
    start_round, elapsed, lines = 1, 0.0, []
    if resume and ckpt_path.exists():
        done, elapsed = load_checkpoint(ckpt_path, fed)
        lines = resumed_lines(metrics_path, ckpt_path, done)
        start_round = done + 1
    atomic_write(metrics_path, "".join(json.dumps(line) + "\n" for line in lines).encode())
    first_step = 0 if start_round == 1 else start_round
    with metrics_path.open("a") as out, open_trackers(config.log, config.to_dict(), seed_dir,
                                                      fed.seed, first_step) as trackers:
        clock = time.perf_counter()  # the run's time, without the trackers' start

        def append(line: dict) -> None:
            with writing(metrics_path):
                out.write(json.dumps(line) + "\n")
                out.flush()
            lines.append(line)
            trackers.round(line)  # observers of the line on disk, never in its way

        setup_line = fed.setup() if start_round == 1 else None
        if setup_line is not None:
            append(setup_line)
        stopped = None
        for rnd in range(start_round, config.rounds + 1):
            stopped = budget_stop(fed, lines, rnd)
            if stopped is not None:
                break
            line = fed.fit_round(rnd)
            if rnd % config.eval_every == 0 or rnd == config.rounds:
                line.update(fed.evaluate(rnd))
            append(line)
            if progress is not None:
                progress.update(fed.seed, rnd, line)
            if config.checkpoint_every and rnd % config.checkpoint_every == 0 \
                    and rnd < config.rounds:
                with writing(metrics_path):  # the rounds a checkpoint follows reach the disk
                    os.fsync(out.fileno())
                save_checkpoint(ckpt_path, fed, rnd, elapsed + time.perf_counter() - clock)
        seconds = elapsed + time.perf_counter() - clock
        if stopped is not None:
            stopped = _stop_at(fed, lines, metrics_path, ckpt_path, stopped, seconds)
        # before the summary: a seed with a summary always keeps the model it ended with
        save_checkpoint(seed_dir / FINAL, fed, max(line["round"] for line in lines), seconds)
        summary = seed_summary(fed, lines, seconds)
        if stopped is not None:
            summary["stopped"] = stopped
        _write_json(seed_dir / "summary.json", summary)
        trackers.finish(summary)
    if stopped is None:  # a stopped seed keeps the model it stopped with
        ckpt_path.unlink(missing_ok=True)
    return summary


def budget_stop(fed: Federation, lines: list[dict], rnd: int) -> str | None:
    """Why round ``rnd`` must not run (``privacy.budget_epsilon``), or None."""
    config = fed.config
    budget = config.privacy.budget_epsilon
    if budget is None:
        return None
    setup = fed.runtime.server.setup
    nominal = ([] if setup.dp is None else
               [dp_release(config.dp, setup.dp.clients_per_round, fed.data.num_clients)])
    why = ledger.budget_exceeded(lines, nominal, rnd, budget, config.dp.delta,
                                 config.privacy.accountant)
    return None if why is None else f"{why}; seed {fed.seed} stops after round {rnd - 1}"


def _stop_at(fed: Federation, lines: list[dict], metrics_path: Path, ckpt_path: Path,
             why: str, seconds: float) -> dict:
    """End a seed before the round its privacy budget cannot pay: said in one line, its last
    round evaluated (added to that round's line when it was not), and checkpointed, so the
    model it stopped with is kept and a resume stops here again."""
    done = max((line["round"] for line in lines), default=0)
    print(why, flush=True)
    log.info(why)
    if done and "clients" not in lines[-1]:
        lines[-1].update(fed.evaluate(done))
        atomic_write(metrics_path, "".join(json.dumps(line) + "\n" for line in lines).encode())
    save_checkpoint(ckpt_path, fed, done, seconds)
    return {"round": done + 1, "reason": why}


SEED_SUMMARY_KEYS = ("seed", "partition_id", "final", "clients", "seconds")


def seed_summary(fed: Federation, lines: list[dict], seconds: float) -> dict:
    last_eval = next(line for line in reversed(lines) if "clients" in line)
    final = {k: last_eval[k] for k in FINAL_KEYS if k in last_eval}
    up = sum(line["bytes_up"] for line in lines)
    down = sum(line["bytes_down"] for line in lines)
    final.update(bytes_up=up, bytes_down=down, bytes_total=up + down)
    rewards = [line["server"] for line in lines[:-1]
               if "reward_components" in line.get("server", {})]
    if rewards:  # sparse rewards of round t travel in round t+1: what dense ones would cost
        final["bytes_down_dense_equivalent"] = down + sum(
            r["reward_bytes_dense"] - r["reward_bytes"] for r in rewards)
    summary = {"seed": fed.seed, "partition_id": fed.data.partition_id, "final": final,
               "clients": last_eval["clients"],
               "rounds": sum(line["round"] > 0 for line in lines), "seconds": seconds,
               "train_seconds": sum(line["train_seconds"] for line in lines),
               "eval_seconds": sum(line.get("eval_seconds", 0.0) for line in lines)}
    # the final numbers computed from what the clients claim (their evaluations), not checked
    summary["self_reported"] = [k for k in self_reported(last_eval["clients"]) if k in final]
    summary["heterogeneity"] = stored_card(fed.data, config_dataset(fed.config),
                                           fed.config.features)
    if fed.data.level == "edge":  # the edges the split kept and those no client holds
        summary["edges"] = edge_report(fed.data, config_dataset(fed.config).graph)
    chosen = attackers(fed.config, fed.seed, fed.data.num_clients)
    if chosen:
        summary["attackers"] = chosen
    privacy = ledger.summary(lines, fed.config.dp.delta, fed.config.privacy.accountant)
    if privacy is not None:
        summary["privacy"] = privacy
    return summary


# ---------------------------------------------------------------- whole runs

def execute(config: ExperimentConfig, run_dir: Path, first: Federation | None,
            progress: bool, resume: bool, make_runtime: RuntimeFactory | None = None) -> dict:
    """Run (or resume) every seed of ``config`` into ``run_dir``, holding the directory's lock
    so that no second process writes it meanwhile; returns the top summary. A round every
    client fails is a ``RunFailed`` saying whether a resume can continue the run; a file that
    cannot be written, a ``WriteFailed`` saying how to go on."""
    summaries = []
    resumable = make_runtime is None  # a Flower run's client states end with its nodes
    with run_dir_lock(run_dir), RoundProgress(config.rounds, len(config.run_seeds),
                                               enabled=progress) as bar:
        try:
            for seed in config.run_seeds:
                seed_dir = run_dir / f"seed-{seed}"
                if resume and (seed_dir / "summary.json").exists():
                    summaries.append(read_json(seed_dir / "summary.json", "seed summary",
                                               SEED_SUMMARY_KEYS))
                    if "stopped" not in summaries[-1]:  # a budget stop keeps its model
                        # a stop between the seed's summary and its end left it behind
                        (seed_dir / CHECKPOINT).unlink(missing_ok=True)
                    continue
                fed = first if first is not None and first.seed == seed else build_federation(
                    config, seed, make_runtime)
                try:
                    summaries.append(run_seed(fed, seed_dir, bar, resume=resume))
                except RoundFailed as e:
                    raise _failed(e, run_dir, seed, resumable) from None
            summary = combine_seeds(config, summaries)
            _write_json(run_dir / "summary.json", summary)
        except WriteFailed as e:
            advice = (f"free space (or fix the cause), then continue with graphfed run "
                      f"--resume {run_dir}" if resumable else "fix the cause and run again")
            raise WriteFailed(f"{e}; {advice}") from None
    return summary


def _kept(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds anything a resume continues from: a checkpoint or a finished
    seed (without either, a resume only starts the run again)."""
    return any(run_dir.glob(f"seed-*/{CHECKPOINT}")) or any(run_dir.glob("seed-*/summary.json"))


def _failed(error: RoundFailed, run_dir: Path, seed: int, resumable: bool) -> RunFailed:
    if resumable and _kept(run_dir):
        return RunFailed(f"seed {seed}, {error}; resume with graphfed run --resume {run_dir} "
                         "once the cause is fixed", resumable=True)
    why = ("nothing was checkpointed that a resume could continue from" if resumable
           else "a Flower run cannot be resumed")
    return RunFailed(f"the run failed: seed {seed}, {error}; {why}: fix the cause and run "
                     "again", resumable=False)


def run_experiment(config: ExperimentConfig, out: str | Path = "runs",
                   progress: bool = True) -> tuple[Path, dict]:
    """Run every seed of ``config``; returns the run directory and its summary.

    The first seed's federation, and every other seed's partition, are built before the run
    directory is created, so bad input never leaves a half-written directory behind.
    """
    if config.runtime != "simulation":
        raise ConfigError(f"runtime={config.runtime} runs through graphfed.launch.run")
    with cpu_threads(config.threads) as threads:
        first = build_federation(config, config.run_seeds[0])
        for seed in config.run_seeds[1:]:  # cached: each seed's run reloads it
            federated_data(config, seed)
        run_dir = new_run_dir(config, Path(out), announce=f"engine {config.engine}, {threads} "
                              f"CPU thread{'s' if threads != 1 else ''}")
        try:
            return run_dir, execute(config, run_dir, first, progress, resume=False)
        except KeyboardInterrupt:
            raise RunInterrupted(run_dir) from None
        except RunFailed as e:
            if e.resumable:
                raise
            shutil.rmtree(run_dir, ignore_errors=True)  # nothing in it a resume could use
            raise RunFailed(f"{e} (the run directory {run_dir} is removed)",
                            resumable=False) from None


@contextmanager
def cpu_threads(count: int) -> Iterator[int]:
    """torch's CPU threads set to the run's ``threads`` while it trains, and set back after
    it, so that a caller's own setting outlives the run."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield count
    finally:
        torch.set_num_threads(before)


def run_config(run_dir: Path) -> ExperimentConfig:
    """The config of the run in ``run_dir`` (its ``config.yaml``), on whichever runtime it
    trained."""
    config_path = run_dir / "config.yaml"
    if not config_path.is_file():
        raise ConfigError(f"'{run_dir}' is not a graphfed run directory (no config.yaml)")
    return load_config(config_path)


def simulated_run_config(run_dir: Path, what: str) -> ExperimentConfig:
    """The config of the run in ``run_dir``, which must have trained in-process: a run on
    another runtime left its clients' states on its nodes. ``what`` (e.g. ``--resume works``)
    opens the refusal."""
    config = run_config(run_dir)
    if config.runtime != "simulation":
        raise ConfigError(f"{what} on runtime=simulation only: a {config.runtime} run's "
                          "client states live on its nodes and end with the run")
    return config


def in_process(config: ExperimentConfig) -> ExperimentConfig:
    """``config`` on ``runtime=simulation``: the same partition and recipe with every client
    in this process, which computes what a Flower run of ``config`` computes (graphfed's
    contract), so its server can hold a Flower run's checkpointed state."""
    if config.runtime == "simulation":
        return config
    return with_overrides(config, {"runtime": "simulation"})


def resume_experiment(run_dir: str | Path, progress: bool = True) -> tuple[Path, dict]:
    """Continue an interrupted run from its checkpoints; ends exactly as an uninterrupted run."""
    run_dir = Path(run_dir)
    config = simulated_run_config(run_dir, "--resume works")
    try:
        with cpu_threads(config.threads):
            return run_dir, execute(config, run_dir, None, progress, resume=True)
    except KeyboardInterrupt:
        raise RunInterrupted(run_dir) from None
