"""A rich progress bar: which seed, its round out of the run's rounds, and live metrics (the bar
itself spans every seed of the run)."""

from __future__ import annotations

from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn


class RoundProgress:
    def __init__(self, rounds: int, seeds: int, enabled: bool = True):
        self.rounds = rounds
        self.enabled = enabled
        self.total = rounds * seeds
        self._progress: Progress | None = None
        self._task = None
        self._metrics: dict[str, str] = {}

    def __enter__(self) -> RoundProgress:
        if self.enabled:
            self._progress = Progress(
                TextColumn("[bold]seed {task.fields[seed]}[/] · round {task.fields[round]}"),
                BarColumn(), TimeElapsedColumn(),
                TextColumn("{task.fields[metrics]}"))
            self._progress.start()
            self._task = self._progress.add_task("run", total=self.total, seed="-",
                                                 round=f"0/{self.rounds}", metrics="")
        return self

    def __exit__(self, *exc) -> None:
        if self._progress is not None:
            self._progress.stop()

    def update(self, seed: int, rnd: int, line: dict) -> None:
        if self._progress is None:
            return
        for key in ("train_loss", "test_acc", "global_test_acc"):
            if line.get(key) is not None:
                self._metrics[key] = f"{key}={line[key]:.4f}"
        self._progress.update(self._task, advance=1, seed=seed, round=f"{rnd}/{self.rounds}",
                              metrics="  ".join(self._metrics.values()))
