"""What a sweep searches: the keys every method shares (``SHARED``, defined once for the whole
registry) and the ranges an algorithm declares on its own option fields.

An algorithm declares a searched option where the option is, in the field's
``json_schema_extra`` under ``"search"`` (a mapping ``Range`` validates), citing where the
range comes from::

    mu: float = Field(0.01, ge=0.0, json_schema_extra={"search": {
        "low": 0.001, "high": 1.0, "log": True, "points": 4, "source": "..."}})

A range is sampled as it is by TPE and cut into ``points`` values for the grid; ``choices``
lists the values outright (both samplers then pick among them). The grid of a budget of N is
the first N points of the full product of every key's grid values shuffled with ``GRID_SEED``:
every method gets a grid of exactly N, and a larger budget extends a smaller one's grid.
"""

from __future__ import annotations

import itertools
import math
import random
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from graphfed.algorithms.registry import Algorithm
from graphfed.errors import GraphfedError

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

SEARCH = "search"  # the json_schema_extra key of an option's declared range
GRID_SEED = 0  # the shuffle of the full grid product whose first N points a budget of N takes
SIGNIFICANT = 3  # significant digits of a grid value cut from a float range

Value = float | int | str | bool


class Range(BaseModel):
    """One searched key: ``low`` .. ``high`` (log-uniform with ``log``; whole numbers with
    ``integer``) cut into ``points`` grid values, or a list of ``choices``. ``source`` says where
    the range comes from."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    points: int = Field(3, ge=2)
    choices: tuple[Value, ...] | None = None
    source: str = Field(min_length=1)

    @model_validator(mode="after")
    def _bounds(self) -> Range:
        if self.choices is not None:
            if self.low is not None or self.high is not None or not self.choices:
                raise ValueError("a range gives either choices or low and high")
            return self
        if self.low is None or self.high is None or not self.low < self.high:
            raise ValueError("a range needs low < high (or choices)")
        if self.log and self.low <= 0:
            raise ValueError("a log range needs low > 0")
        return self

    def grid(self) -> list[Value]:
        """The grid values: the choices, or ``points`` values evenly spaced from low to high
        (on a log scale with ``log``), rounded to ``SIGNIFICANT`` digits (whole numbers with
        ``integer``, duplicates dropped)."""
        if self.choices is not None:
            return list(self.choices)
        assert self.low is not None and self.high is not None
        scale = (math.log, math.exp) if self.log else (float, float)
        lo, hi = scale[0](self.low), scale[0](self.high)
        values = [scale[1](lo + (hi - lo) * i / (self.points - 1)) for i in range(self.points)]
        if self.integer:
            return list(dict.fromkeys(round(v) for v in values))
        return [min(max(float(f"{v:.{SIGNIFICANT}g}"), self.low), self.high) for v in values]

    def distribution(self) -> BaseDistribution:
        """The Optuna distribution TPE samples the key from."""
        from optuna.distributions import (
            CategoricalDistribution,
            FloatDistribution,
            IntDistribution,
        )

        if self.choices is not None:
            return CategoricalDistribution(self.choices)
        assert self.low is not None and self.high is not None
        if self.integer:
            return IntDistribution(int(self.low), int(self.high), log=self.log)
        return FloatDistribution(self.low, self.high, log=self.log)


# the keys every method trains with, searched for every method; graphfed's own choice around
# its defaults (lr 0.01, weight decay 5e-4, dropout 0.5, one local epoch)
_OURS = "graphfed's shared default space"
SHARED: dict[str, Range] = {
    "optimizer.lr": Range(low=1e-3, high=1e-1, log=True, points=5, source=_OURS),
    "local_epochs": Range(low=1, high=5, integer=True, points=3, source=_OURS),
    "optimizer.weight_decay": Range(choices=(0.0, 5e-4, 5e-3), source=_OURS),
    "model.dropout": Range(low=0.0, high=0.6, points=4, source=_OURS),
}

Space = dict[str, Range]


def declared(algorithm: Algorithm) -> Space:
    """The ranges ``algorithm`` declares on its option fields, keyed as config keys
    (``fedprox.mu``)."""
    space: Space = {}
    for name, field in algorithm.options.model_fields.items():
        extra = field.json_schema_extra
        if isinstance(extra, dict) and SEARCH in extra:
            try:
                space[f"{algorithm.name}.{name}"] = Range.model_validate(extra[SEARCH])
            except ValueError as e:
                raise GraphfedError(f"{algorithm.name}.{name}: bad search range: "
                                    f"{' '.join(str(e).split())}") from None
    return space


def method_space(algorithm: Algorithm) -> Space:
    """Everything a sweep searches for ``algorithm``: the shared keys and its own."""
    return {**SHARED, **declared(algorithm)}


def grid(space: Space, size: int, method: str) -> list[dict[str, Value]]:
    """The first ``size`` points of the full product of the keys' grid values, shuffled with
    ``GRID_SEED`` (the same shuffle whatever ``size``, so a larger budget extends the grid)."""
    names = sorted(space)
    product = list(itertools.product(*(space[name].grid() for name in names)))
    if size > len(product):
        raise GraphfedError(f"--budget {size}: the grid of {method} has only {len(product)} "
                            "points; use --sampler tpe or a smaller budget")
    random.Random(GRID_SEED).shuffle(product)
    return [dict(zip(names, point, strict=True)) for point in product[:size]]


def distributions(space: Space) -> dict[str, BaseDistribution]:
    return {name: space[name].distribution() for name in sorted(space)}


def describe(space: Space) -> dict[str, Any]:
    """The space as plain data: what a study records to refuse a changed space."""
    return {name: space[name].model_dump(mode="json", exclude={"source"})
            for name in sorted(space)}
