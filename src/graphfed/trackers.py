"""Experiment trackers (the ``log`` config section, ``graphfed run --log``): each seed's round
records, its config and its final summary streamed to TensorBoard and/or MLflow as the run
writes them.

The run directory stays the record: a tracker is fed the same lines that go to ``metrics.jsonl``
and a tracker that fails (a folder it cannot write, a tracking server that is down) is reported
in one warning line and dropped, while the run goes on. A resumed seed continues its TensorBoard
folder (the steps it runs again replace the interrupted run's) and its MLflow run (whose id the
seed's folder keeps; the rounds it already holds are not logged twice). TensorBoard and MLflow
are imported only when a tracker opens, so neither slows a run that does not use it.
"""

from __future__ import annotations

import importlib.util
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field, field_validator, model_validator

from graphfed.errors import GraphfedError
from graphfed.validation import OPTIONS

Tracker = Literal["tensorboard", "mlflow"]
# each tracker: the module it needs, its name in messages (the extra is the tracker's name)
NEEDS: dict[str, tuple[str, str]] = {"tensorboard": ("tensorboard", "TensorBoard"),
                                     "mlflow": ("mlflow", "MLflow")}
MLFLOW_RUN_ID = "mlflow-run-id"  # in the seed's folder: the MLflow run a resume continues
LOGGED_ROUND = "graphfed.logged_round"  # MLflow run tag: the last round the run holds

log = logging.getLogger(__name__)


class LogOptions(BaseModel):
    """Where a run's records are streamed besides its run directory. ``log: tensorboard``,
    ``log: [tensorboard, mlflow]`` and ``log: tensorboard,mlflow`` are shorthands for
    ``trackers``."""

    model_config = OPTIONS

    trackers: list[Tracker] = Field(
        default_factory=list, description="tensorboard and/or mlflow: every round's metrics, "
        "the config and the final summary of each seed (extras graphfed[tensorboard], "
        "graphfed[mlflow]); none by default")
    tensorboard_dir: str | None = Field(
        None, description="folder of the TensorBoard event files: <dir>/<run name>/seed-<s> "
        "(default: seed-<s>/tensorboard in the run directory)")
    tracking_uri: str | None = Field(
        None, description="MLflow tracking URI, e.g. http://host:5000 or sqlite:///mlflow.db "
        "(default: the SQLite store mlflow.db in the run directory); one MLflow run per seed "
        "in the experiment named after the run directory")
    clients: bool = Field(False, description="also each client's values, under "
                          "clients/<id>/")

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        """The trackers alone stand for the section; an override that sets the section to a
        string (``log=mlflow`` over a config's ``log`` section) sets its ``name``, as it does
        for every section, and a tracker section's choice is its trackers."""
        if data is None:  # ``log:`` with nothing after it: no trackers
            return {}
        if isinstance(data, str | list):
            return {"trackers": data}
        if isinstance(data, dict) and "name" in data:
            data = {k: v for k, v in data.items() if k != "name"} | {"trackers": data["name"]}
        return data

    @field_validator("trackers", mode="before")
    @classmethod
    def _comma_list(cls, v: Any) -> Any:
        return [name.strip() for name in v.split(",") if name.strip()] if isinstance(v, str) \
            else v

    @field_validator("trackers")
    @classmethod
    def _once_each(cls, v: list[Tracker]) -> list[Tracker]:
        return list(dict.fromkeys(v))


def require(trackers: list[str]) -> None:
    """Refuse a tracker whose package is not installed, in one line saying what to install."""
    for name in trackers:
        module, shown = NEEDS[name]
        if importlib.util.find_spec(module) is None:
            raise GraphfedError(f"--log {name} needs {shown}: pip install 'graphfed[{name}]'")


def flatten(data: dict, prefix: str = "") -> dict[str, Any]:
    """Nested config sections as dotted keys (``model.hidden``)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _numbers(record: dict, prefix: str = "", skip: tuple[str, ...] = ()) -> dict[str, float]:
    return {f"{prefix}{k}": float(v) for k, v in record.items()
            if k not in skip and isinstance(v, int | float) and not isinstance(v, bool)}


def scalars(line: dict, clients: bool) -> dict[str, float]:
    """The numbers of a ``metrics.jsonl`` line: the run-level ones by their own key, the
    algorithm's under ``server/``, and with ``clients`` each client's under ``clients/<id>/``."""
    out = _numbers(line, skip=("round",))
    out.update(_numbers(line.get("server", {}), "server/"))
    if clients:
        for record in line.get("clients", []):
            out.update(_numbers(record, f"clients/{record['client']}/", skip=("client",)))
    return out


class _Sink(Protocol):
    def round(self, step: int, values: dict[str, float]) -> None: ...

    def finish(self, step: int, summary: dict) -> None: ...

    def close(self) -> None: ...


class _TensorBoard:
    """A ``SummaryWriter`` on the seed's folder; reopened by a resume, it purges what the
    interrupted run logged from ``first_step`` on (those rounds run again)."""

    def __init__(self, folder: Path, params: dict[str, Any], first_step: int):
        from torch.utils.tensorboard import SummaryWriter

        resumed = folder.is_dir()
        self.params = {k: v if isinstance(v, int | float | str) else str(v)
                       for k, v in params.items()}
        self.writer = SummaryWriter(str(folder), purge_step=first_step if resumed else None)

    def round(self, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()  # TensorBoard shows the round while the run goes on

    def finish(self, step: int, summary: dict) -> None:
        """The final metrics as ``final/<key>`` scalars and, with the config, as the
        HParams dashboard's session."""
        from torch.utils.tensorboard.summary import hparams

        final = _numbers(summary["final"], "final/")
        self.round(step, final)
        file_writer = self.writer.file_writer
        if file_writer is not None:
            for part in hparams(self.params, final):
                file_writer.add_summary(part, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class _MLflow:
    """One MLflow run of the seed, in the experiment named after the run directory; a resume
    continues the run whose id the seed's folder keeps."""

    def __init__(self, uri: str, run_dir: Path, seed_dir: Path, params: dict[str, Any],
                 embedded: bool):
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient(uri)
        id_file = seed_dir / MLFLOW_RUN_ID
        if id_file.is_file():
            self.run_id = id_file.read_text().strip()
            self.client.update_run(self.run_id, status="RUNNING")
            done = self.client.get_run(self.run_id).data.tags.get(LOGGED_ROUND)
            self.logged = -1 if done is None else int(done)
            return
        found = self.client.get_experiment_by_name(run_dir.name)
        experiment = found.experiment_id if found is not None else self.client.create_experiment(
            run_dir.name, artifact_location=(run_dir / "mlartifacts").as_uri() if embedded
            else None)
        self.run_id = self.client.create_run(
            experiment, run_name=seed_dir.name,
            tags={"graphfed.run_dir": str(run_dir.resolve())}).info.run_id
        id_file.write_text(self.run_id + "\n")
        self.logged = -1
        self._log(params=[Param(k, str(v)) for k, v in params.items()])

    def _log(self, metrics: list | None = None, params: list | None = None,
             tags: list | None = None) -> None:
        """``log_batch`` in pieces MLflow accepts (at most 1000 entries a call, 100 of them
        params), ``tags`` with the last piece: a round is marked logged once its values are."""
        metrics, params = metrics or [], params or []
        while True:
            some, metrics = metrics[:800], metrics[800:]
            few, params = params[:100], params[100:]
            last = not metrics and not params
            self.client.log_batch(self.run_id, metrics=some, params=few,
                                  tags=(tags or []) if last else [])
            if last:
                return

    def round(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric, RunTag

        if step <= self.logged:  # a resume runs again what the interrupted run logged
            return
        stamp = int(time.time() * 1000)
        self._log([Metric(k, v, stamp, step) for k, v in values.items()],
                  tags=[RunTag(LOGGED_ROUND, str(step))])
        self.logged = step

    def finish(self, step: int, summary: dict) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        self._log([Metric(k, v, stamp, step)
                   for k, v in _numbers(summary["final"], "final/").items()])
        self.client.log_dict(self.run_id, summary, "summary.json")
        self.client.set_terminated(self.run_id, "FINISHED")

    def close(self) -> None:
        """An unfinished run (interrupted, failed) is marked killed until a resume continues
        it."""
        if self.client.get_run(self.run_id).info.status == "RUNNING":
            self.client.set_terminated(self.run_id, "KILLED")


class Trackers:
    """The trackers of one seed. Every call reaches each tracker still working; one that fails
    is reported in one warning line and dropped, and the run goes on without it."""

    def __init__(self, sinks: dict[str, _Sink], clients: bool):
        self._sinks = sinks
        self._clients = clients
        self._step = 0

    def _each(self, action: Callable[[_Sink], None]) -> None:
        for name, sink in list(self._sinks.items()):
            try:
                action(sink)
            except Exception as e:  # a tracker never stops the run: its files are the record
                _stopped(name, e)
                del self._sinks[name]
                with suppress(Exception):
                    sink.close()

    def round(self, line: dict) -> None:
        """One ``metrics.jsonl`` line, at the step of its round."""
        self._step = line["round"]
        values = scalars(line, self._clients)
        self._each(lambda sink: sink.round(self._step, values))

    def finish(self, summary: dict) -> None:
        """The seed's summary (``summary.json``): its final metrics, at the last round."""
        self._each(lambda sink: sink.finish(self._step, summary))

    def close(self) -> None:
        self._each(lambda sink: sink.close())


def _stopped(name: str, error: BaseException) -> None:
    why = " ".join(str(error).split()) or type(error).__name__  # one line, whatever it quotes
    log.warning("--log %s stopped: %s; the run goes on (its run directory is complete)", name,
                why)


def _open(name: str, options: LogOptions, run_dir: Path, seed_dir: Path,
          params: dict[str, Any], first_step: int) -> _Sink:
    require([name])
    if name == "tensorboard":
        folder = (seed_dir / "tensorboard" if options.tensorboard_dir is None
                  else Path(options.tensorboard_dir) / run_dir.name / seed_dir.name)
        return _TensorBoard(folder, params, first_step)
    uri = options.tracking_uri or f"sqlite:///{(run_dir / 'mlflow.db').resolve()}"
    return _MLflow(uri, run_dir, seed_dir, params, embedded=options.tracking_uri is None)


@contextmanager
def open_trackers(options: LogOptions, config: dict, seed_dir: Path, seed: int,
                  first_step: int) -> Iterator[Trackers]:
    """The trackers ``options`` names for the seed whose folder is ``seed_dir`` (in its run
    directory), given the run's ``config`` (as ``config.yaml`` holds it); ``first_step``: the
    first round this pass runs (0 for a seed run from its start: its setup exchange, if any),
    where a resumed tracker continues."""
    params = {**flatten(config), "seed": seed}
    sinks: dict[str, _Sink] = {}
    for name in options.trackers:
        try:
            sinks[name] = _open(name, options, seed_dir.parent, seed_dir, params, first_step)
        except Exception as e:  # as any later failure: one warning, the run goes on
            _stopped(name, e)
    trackers = Trackers(sinks, options.clients)
    try:
        yield trackers
    finally:
        trackers.close()
