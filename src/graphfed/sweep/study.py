"""One method's Optuna study: a trial per budget slot, resumable from its storage.

Each trial carries its ``slot`` (0 .. budget-1) as a user attribute; a slot is done when a
COMPLETE trial holds it. With the grid sampler slot k is grid point k (enqueued as fixed
values), so which trial trains which point never depends on how many workers train them. A
trial left RUNNING by a stopped sweep is failed on the next start and its values enqueued
again for the same slot (its run directory resumes from its checkpoint). The study records
what it was made for (search space, sampler, objective, config): another sweep on it is
refused rather than mixing trials of two searches.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast

from graphfed.errors import GraphfedError
from graphfed.sweep.space import Space, distributions, grid

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial, Trial

SAMPLERS = ("grid", "tpe")
SAMPLER_SEED = 0  # TPESampler's seed
SLOT = "slot"
MADE_FOR = "graphfed_sweep"  # the study's user attribute recording what it searches


def require_optuna() -> ModuleType:
    """Optuna, or the one line saying how to install it."""
    try:
        import optuna
    except ImportError:
        raise GraphfedError("graphfed sweep needs Optuna: pip install 'graphfed[sweep]'"
                            ) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


@dataclass
class MethodStudy:
    """The study of one method: ``budget`` trials over ``space`` with ``sampler``."""

    method: str
    study: optuna.Study
    space: Space
    sampler: str
    budget: int

    @classmethod
    def open(cls, method: str, storage: str, space: Space, sampler: str, budget: int,
             direction: str, made_for: dict[str, Any],
             resolve: Callable[[dict[str, Any]], dict[str, Any]] = dict) -> MethodStudy:
        """Create or load the study ``method`` in ``storage``, refusing one made for another
        search (``made_for``, against what the study recorded as ``resolve`` reads it today)
        or holding more finished trials than ``budget``."""
        optuna = require_optuna()
        from sqlalchemy.exc import SQLAlchemyError  # Optuna's storage layer

        chosen = (optuna.samplers.TPESampler(seed=SAMPLER_SEED) if sampler == "tpe"
                  else optuna.samplers.RandomSampler(seed=SAMPLER_SEED))  # grid: all enqueued
        try:
            study = optuna.create_study(storage=storage, study_name=method, sampler=chosen,
                                        direction=direction, load_if_exists=True)
        except (ValueError, ImportError, optuna.exceptions.OptunaError, SQLAlchemyError) as e:
            raise GraphfedError(f"--storage {storage}: {' '.join(str(e).split())}") from None
        recorded = study.user_attrs.get(MADE_FOR)
        if recorded is None:
            study.set_user_attr(MADE_FOR, made_for)
        elif (recorded := resolve(recorded)) != made_for:
            changed = ", ".join(k for k in made_for if recorded.get(k) != made_for[k])
            raise GraphfedError(f"study {method} in {storage} was made for another sweep "
                                f"(changed: {changed}); use another --out or --storage")
        opened = cls(method, study, space, sampler, budget)
        done = len(opened.finished())
        if done > budget:
            raise GraphfedError(f"study {method} in {storage} has {done} finished trials, more "
                                f"than --budget {budget}: a budget can grow, not shrink")
        return opened

    def finished(self) -> list[FrozenTrial]:
        from optuna.trial import TrialState

        return [t for t in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
                if SLOT in t.user_attrs]

    def missing(self) -> list[int]:
        """The slots without a finished trial."""
        done = {t.user_attrs[SLOT] for t in self.finished()}
        return [k for k in range(self.budget) if k not in done]

    def ask(self, count: int) -> list[tuple[Trial, int]]:
        """Up to ``count`` new trials, each with its slot: trials a stopped sweep left are
        asked again first, then (grid) the missing points or (TPE) the sampler's picks."""
        from optuna.trial import TrialState

        missing = self.missing()
        self._requeue_stale(missing)
        claimed = {t.user_attrs.get(SLOT) for t in self.study.get_trials(
            deepcopy=False, states=(TrialState.WAITING,))}
        if self.sampler == "grid":
            points = grid(self.space, self.budget, self.method)
            for k in missing:
                if k not in claimed:
                    self.study.enqueue_trial(dict(points[k]), user_attrs={SLOT: k})
                    claimed.add(k)
        asked: list[tuple[Trial, int]] = []
        space = distributions(self.space)
        for _ in range(min(count, len(missing))):
            trial = self.study.ask(space)  # an enqueued trial first, in the order enqueued
            slot: int | None = trial.user_attrs.get(SLOT)
            if slot is None:  # a TPE pick: the first slot no trial holds
                slot = next(k for k in missing if k not in claimed)
                trial.set_user_attr(SLOT, slot)
            claimed.add(slot)
            asked.append((trial, slot))
        return asked

    def _requeue_stale(self, missing: list[int]) -> None:
        """Fail the trials a stopped sweep left running and enqueue their values again for
        their slots (the runs, named by slot, resume from their checkpoints); a trial without
        a value for every key leaves its slot to be asked afresh."""
        from optuna.trial import TrialState

        for stale in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            self.study.tell(stale.number, state=TrialState.FAIL)
            if stale.user_attrs.get(SLOT) in missing and set(stale.params) == set(self.space):
                self.study.enqueue_trial(stale.params, user_attrs=stale.user_attrs)

    def tell(self, trial: Trial, value: float) -> None:
        self.study.tell(trial, value)

    def best(self) -> FrozenTrial:
        """The finished trial with the best value; on a tie the lowest slot."""
        sign = 1 if self.study.direction.name == "MAXIMIZE" else -1
        return max(self.finished(),
                   key=lambda t: (sign * cast(float, t.value), -t.user_attrs[SLOT]))
