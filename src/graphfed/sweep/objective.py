"""A trial: its config (the method's config with the trial's values, trained on ``TRIAL_SEED``)
and its score, read from the validation numbers of its run only: no test number is looked at
while a sweep searches."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from graphfed.config import ExperimentConfig, with_overrides
from graphfed.config_file import parse_overrides
from graphfed.reproduce.selection import BY_VALIDATION, evaluated, selected_round

TRIAL_SEED = 0  # every trial trains on seed 0, the first of the seeds the winner is re-run on


@dataclass(frozen=True)
class Objective:
    """What a trial is scored by: ``rule``, the validation selector (``reproduce.selection``)
    whose round it reads, the value at that round, and whether higher is better. The final
    test numbers come from the round the same rule picks."""

    name: str
    rule: str
    help: str

    @property
    def key(self) -> str:
        return BY_VALIDATION[self.rule][0]

    @property
    def direction(self) -> str:
        return "minimize" if BY_VALIDATION[self.rule][1] else "maximize"

    def worst(self) -> float:
        return math.inf if self.direction == "minimize" else -math.inf

    def score(self, lines: list[dict]) -> float:
        """The trial's value from its ``metrics.jsonl`` lines: ``key`` at the evaluated round
        ``rule`` picks; a value that is not finite (a diverged model) scores the worst, so the
        trial counts towards the budget and never wins."""
        value = float(selected_round(self.rule, evaluated(lines), self.key)[self.key])
        return value if math.isfinite(value) else self.worst()


OBJECTIVES = {o.name: o for o in (
    Objective("val_acc", "max_val_acc", "the highest validation accuracy (mean over clients) "
              "of any evaluated round"),
    Objective("val_loss", "min_val_loss", "the lowest pooled validation loss of any "
              "evaluated round"),
)}
DEFAULT_OBJECTIVE = "val_acc"


def method_config(base: ExperimentConfig, algorithm: str, extra: tuple[str, ...] = ()
                  ) -> ExperimentConfig:
    """The base config with ``algorithm`` running it, then ``extra`` (``key=value``: the
    settings a protocol gives that method alone, e.g. FED-PUB's own)."""
    return with_overrides(base, {"algorithm": algorithm, **dict(parse_overrides(list(extra)))})


def trial_config(config: ExperimentConfig, params: dict[str, Any], name: str,
                 seeds: list[int] | None = None) -> ExperimentConfig:
    """``config`` with a trial's values, named ``name``, on ``seeds`` (default: the trial
    seed alone)."""
    return with_overrides(config, {**params, "seeds": seeds or [TRIAL_SEED], "name": name})
