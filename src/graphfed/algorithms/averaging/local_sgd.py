"""Methods whose derivation assumes plain SGD local steps (SCAFFOLD's Alg. 1, q-FedAvg's Alg. 2)
train with it by default, whatever ``optimizer.name`` says; ``local_optimizer=run`` keeps the
run's optimizer instead."""

from __future__ import annotations

from typing import Literal, Protocol

from graphfed.training import OptimizerOptions

LocalOptimizer = Literal["sgd", "run"]


class ChoosesLocalOptimizer(Protocol):
    local_optimizer: LocalOptimizer | None


def local_optimizer(run: OptimizerOptions, options: ChoosesLocalOptimizer) -> OptimizerOptions:
    """What the clients train with: plain SGD at the run's rate (keeping its weight decay and
    momentum), or the run's optimizer."""
    if options.local_optimizer == "sgd":
        return run.model_copy(update={"name": "sgd"})
    return run
