"""Attacks on what a finished run released (``graphfed audit``): membership inference by a loss
threshold (``mia``) and by offline LiRA with shadow federations (``lira``), and link stealing
on node-level models (``link``). Each is scored by its ROC-AUC and its TPR at 1 % FPR, and
states what its threat model gives the attacker; ``audit.json`` in the seed's ``audit/``
folder keeps the results."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from graphfed.audit.link import link_stealing
from graphfed.audit.lira import Progress, offline_lira
from graphfed.audit.mia import loss_threshold
from graphfed.audit.scoring import LOW_FPR, AttackResult
from graphfed.audit.target import RELEASED, AuditedRun, Released, audited_run, open_run
from graphfed.errors import GraphfedError
from graphfed.experiment import cpu_threads
from graphfed.plotting import legend_outside, saved_figure, title
from graphfed.serialization import atomic_write


@dataclass(frozen=True)
class AuditOptions:
    """What the attacks may be told: LiRA's shadow count and where progress lines go."""

    shadows: int
    progress: Progress


@dataclass(frozen=True)
class Attack:
    """An attack of the audit: how it runs and the task levels it applies to."""

    run: Callable[[AuditedRun, AuditOptions], AttackResult]
    levels: tuple[str, ...]


ATTACKS = {
    "mia": Attack(lambda run, _: loss_threshold(run), ("node", "graph")),
    "lira": Attack(lambda run, o: offline_lira(run, o.shadows, o.progress), ("node", "graph")),
    "link": Attack(lambda run, _: link_stealing(run), ("node",)),
}


@dataclass(frozen=True)
class Audit:
    """The audit of one seed: what it attacked and each attack's result."""

    run_dir: Path
    seed: int
    released: Released
    results: list[AttackResult]

    @property
    def path(self) -> Path:
        """Where the audit is kept: ``audit/audit.json`` in the seed's folder."""
        return self.run_dir / f"seed-{self.seed}" / "audit" / "audit.json"

    def to_json(self) -> dict[str, object]:
        return {"run": str(self.run_dir), "seed": self.seed, "target": self.released,
                "target_model": RELEASED[self.released],
                "attacks": [r.row() for r in self.results]}


def chosen_attacks(names: list[str] | None, level: str) -> list[str]:
    """The attacks ``names`` asks for (default: every one that applies to ``level``), each
    known and applicable, or one ``GraphfedError``."""
    if not names:
        names = [name for name, attack in ATTACKS.items() if level in attack.levels]
        if not names:
            raise GraphfedError(f"graphfed audit has no attack on {level}-level runs")
        return names
    for name in names:
        if name not in ATTACKS:
            raise GraphfedError(f"--attack {name}: unknown attack; choose from "
                                f"{', '.join(ATTACKS)}")
        if level not in ATTACKS[name].levels:
            raise GraphfedError(f"--attack {name} applies to {'/'.join(ATTACKS[name].levels)}-"
                                f"level runs; this is a {level}-level run")
    return list(dict.fromkeys(names))


def audit_run(run_dir: Path, names: list[str] | None, seed: int | None, shadows: int,
          progress: Progress) -> Audit:
    """Run the chosen attacks on seed ``seed`` (default: the first) of the finished run
    ``run_dir`` and write ``audit/audit.json`` in its seed folder. Bad input (not a finished
    run, a seed it did not run, an attack that does not apply) fails before any model is
    built."""
    config, seed = open_run(run_dir, seed)
    names = chosen_attacks(names, config.level)
    if "lira" in names and shadows < 2:
        raise GraphfedError(f"--shadows {shadows}: LiRA fits a Gaussian to each candidate's "
                            "shadow confidences and needs 2 or more")
    with cpu_threads(config.threads):
        run = audited_run(run_dir, config, seed)
        options = AuditOptions(shadows, progress)
        result = Audit(run_dir, seed, run.released,
                       [ATTACKS[name].run(run, options) for name in names])
    result.path.parent.mkdir(exist_ok=True)
    atomic_write(result.path, json.dumps(result.to_json(), indent=2).encode())
    return result


def plot_roc(result: Audit, path: Path) -> None:
    """Each attack's ROC on log-log axes (where the low false-positive rates an attacker
    cares about are visible), with the chance line and the 1 % FPR mark."""
    with saved_figure(path, 7.5, 5) as (fig, ax):
        smallest = 1.0
        for r in result.results:
            smallest = min(smallest, 1 / max(r.non_members, 1))
            ax.plot(r.roc.fpr, r.roc.tpr, drawstyle="steps-post",
                    label=f"{r.attack} (AUC {r.auc:.3f}, TPR@1% {r.tpr_at_1pct_fpr:.3f})")
        ax.plot([smallest, 1], [smallest, 1], "k:", label="chance")
        ax.axvline(LOW_FPR, color="grey", linewidth=0.8)
        ax.set(xscale="log", yscale="log", xlim=(smallest, 1), ylim=(smallest, 1.05),
               xlabel="false-positive rate", ylabel="true-positive rate")
        title(fig, ax, f"{result.run_dir.name} seed {result.seed}: attacks on "
                       f"{RELEASED[result.released]}")
        legend_outside(fig, ax, "attack", below=True)
