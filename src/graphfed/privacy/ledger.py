"""One privacy ledger per run: every noised release, recorded where it happened, composed into
(epsilon, delta) per round, per message and in total.

A server hands its releases to the round's line of ``metrics.jsonl`` (``Server.take_releases``,
key ``privacy``), so the ledger is a function of the lines: a resumed run rebuilds it from the
lines its checkpoint follows, and the Flower runtimes, whose server runs the same round logic,
record the same. Two kinds of release:

* ``gaussian``: noise of std z times the release's L2 sensitivity (z: ``noise_multiplier``), on
  a Poisson sample of rate ``sampling_rate``, ``count`` times; composed by ``dp-accounting``'s
  RDP or PLD accountant. ``noise_multiplier`` None: the sensitivity is not bounded (noise on
  unclipped values), so no epsilon holds: the ledger says unbounded.
* ``pure``: an epsilon-DP release (local DP: randomised response, the exponential mechanism);
  with ``cumulative`` its epsilon is the total spent so far by the worst-off unit, and a round
  costs its increase. Composed by basic composition (epsilons add, delta 0), added to the
  Gaussian part's epsilon: the bound for a pair of (eps_1, delta) and (eps_2, 0) mechanisms.
  ``dp-accounting`` would compose pure releases tighter only by modelling each as randomised
  response; basic composition keeps the ledger's epsilon equal to the one the run recorded.

The total treats every release as one individual's: an upper bound where they protect
different units (a client's whole data under DP-FedAvg, one node or link under local DP).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Literal

from graphfed.errors import GraphfedError
from graphfed.privacy.accounting import ACCOUNTANTS, Accountant, gaussian_epsilon

Mechanism = Literal["gaussian", "pure"]
LINE_KEY = "privacy"  # a metrics.jsonl line's releases


@dataclass(frozen=True)
class Release:
    """One noised release of a round (see the module's docstring for the two kinds)."""

    message: str
    mechanism: Mechanism
    noise_multiplier: float | None = None
    sampling_rate: float = 1.0
    count: int = 1
    epsilon: float | None = None
    cumulative: bool = False
    note: str | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Release:
        try:
            return cls(**data)
        except TypeError as e:
            raise GraphfedError(f"a privacy release of metrics.jsonl is damaged: {e}") from None


def round_releases(lines: Iterable[dict[str, Any]]) -> list[tuple[int, list[Release]]]:
    """Each round that released something, with what it cost: a cumulative pure release
    becomes its increase over the message's previous value."""
    spent: dict[str, float] = {}
    out = []
    for line in lines:
        releases = []
        for data in line.get(LINE_KEY, ()):
            release = Release.from_dict(data)
            if release.mechanism == "pure" and release.cumulative:
                total = float(release.epsilon or 0.0)
                release = replace(release, epsilon=max(total - spent.get(release.message, 0.0),
                                                       0.0), cumulative=False)
                spent[release.message] = max(total, spent.get(release.message, 0.0))
            releases.append(release)
        if releases:
            out.append((int(line["round"]), releases))
    return out


def epsilon(releases: Sequence[Release], delta: float, accountant: Accountant = "rdp"
            ) -> float:
    """epsilon at ``delta`` of all ``releases`` composed (infinity: one is unbounded)."""
    if any(r.mechanism == "gaussian" and r.noise_multiplier is None for r in releases):
        return math.inf
    groups: dict[tuple[float, float], int] = {}
    for r in releases:
        if r.mechanism == "gaussian":
            assert r.noise_multiplier is not None  # unbounded ones returned above
            key = (r.noise_multiplier, r.sampling_rate)
            groups[key] = groups.get(key, 0) + r.count
    pure = sum(r.epsilon or 0.0 for r in releases if r.mechanism == "pure")
    gaussian = gaussian_epsilon([(z, q, n) for (z, q), n in groups.items()], delta, accountant)
    return gaussian + pure


def _number(value: float) -> float | None:
    """JSON has no infinity: an unbounded epsilon is null (the summary names why)."""
    return None if math.isinf(value) else value


def summary(lines: Iterable[dict[str, Any]], delta: float, accountant: Accountant = "rdp"
            ) -> dict[str, Any] | None:
    """``summary.json``'s ``privacy``: epsilon at ``delta`` in total (by ``accountant``, and by
    each accountant), per message and after every round; None where nothing was released."""
    rounds = round_releases(lines)
    if not rounds:
        return None
    every = [r for _, releases in rounds for r in releases]
    by_round, so_far = [], []
    for rnd, releases in rounds:
        so_far.extend(releases)
        by_round.append({"round": rnd, "epsilon": _number(epsilon(so_far, delta, accountant)),
                         "epsilon_round": _number(epsilon(releases, delta, accountant))})
    by_message: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys(r.message for r in every):
        own = [r for r in every if r.message == name]
        first = own[0]
        entry: dict[str, Any] = {
            "mechanism": first.mechanism, "releases": sum(r.count for r in own),
            "rounds": sum(any(r.message == name for r in rs) for _, rs in rounds),
            "epsilon": _number(epsilon(own, delta, accountant))}
        if first.mechanism == "gaussian":
            entry.update(noise_multiplier=first.noise_multiplier,
                         sampling_rate=first.sampling_rate)
        if first.note:
            entry["note"] = first.note
        by_message[name] = entry
    out: dict[str, Any] = {
        "epsilon": _number(epsilon(every, delta, accountant)), "delta": delta,
        "accountant": accountant,
        "epsilon_by_accountant": {a: _number(epsilon(every, delta, a)) for a in ACCOUNTANTS},
        "by_message": by_message, "by_round": by_round}
    unbounded = [name for name, entry in by_message.items() if entry["epsilon"] is None]
    if unbounded:
        out["unbounded"] = unbounded
    return out


def budget_exceeded(lines: Sequence[dict[str, Any]], nominal: Sequence[Release], rnd: int,
                    budget: float, delta: float, accountant: Accountant = "rdp") -> str | None:
    """Why round ``rnd`` must not run under ``budget`` (None: it may): the epsilon after it,
    taking it to release what the last round did (before any round released: ``nominal``, the
    run's own DP-FedAvg release), would exceed the budget."""
    rounds = round_releases(lines)
    fitted = [releases for r, releases in rounds if r > 0]
    forecast = list(fitted[-1]) if fitted else list(nominal)
    after = epsilon([r for _, releases in rounds for r in releases] + forecast, delta,
                    accountant)
    if after <= budget:
        return None
    shown = "unbounded" if math.isinf(after) else f"{after:.4g}"
    return (f"privacy.budget_epsilon={budget:g}: round {rnd} would bring epsilon to {shown} "
            f"(delta {delta:g})")
