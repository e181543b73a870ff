"""Which cells a reproduction runs, and what of them is already done.

A cell is one (method, setting, fold) of a preset with all its seeds, run as an ordinary run
directory under ``OUT/runs/<method>-<setting>[-fold<f>]``. Its config is fixed here, before any
training, so bad input costs nothing; a directory left by an earlier run is kept when it holds
the same config (but perhaps other seeds), and removed otherwise.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import yaml

from graphfed.config import ConfigError, ExperimentConfig, load_config
from graphfed.errors import GraphfedError
from graphfed.reproduce.preset import Preset, Variant
from graphfed.reproduce.settings import Setting, keep_matching, parse_label, same_dataset

# the committed tables were trained one client after another: a preset regenerates them bit for
# bit on that engine unless it (or the command's overrides) says otherwise
PINNED = ("engine=sequential",)
# keys a cell's directory may differ in and still serve it: the seeds (a finished seed is kept)
# and the threads (which change no number)
KEPT_ACROSS = ("seed", "seeds", "threads")


@dataclass
class Cell:
    variant: Variant
    dataset: str  # the table's label of the setting
    config: ExperimentConfig | None
    fold: int | None = None
    run_dir: Path | None = None
    summary: dict | None = None

    @property
    def seeds(self) -> list[int]:
        """The seeds this cell ran (none for a row computed without training)."""
        return self.summary["seeds"] if self.summary else []


def select(preset: Preset, methods: list[str] | None, datasets: list[str] | None,
           settings: list[str] | None = None) -> tuple[list[Variant], list[str]]:
    """The variants and setting labels to run (``datasets`` keeps every setting of those
    datasets, ``settings`` the labels its ``key=value`` filters match); the preset's reference
    run joins whenever it has one."""
    known = {v.method: v for v in preset.variants}
    if methods:
        unknown = [m for m in methods if m not in known]
        if unknown:
            raise GraphfedError(f"preset {preset.name} has no method(s) {unknown}; "
                                f"available: {', '.join(known)}")
        chosen = [known[m] for m in methods]
    else:
        chosen = list(preset.variants)
    if preset.reference in known and known[preset.reference] not in chosen:
        chosen.insert(0, known[preset.reference])
    labels = [parse_label(label, preset.setting_keys) for label in preset.datasets]
    if datasets:
        unknown = [d for d in datasets if not any(same_dataset(d, s.dataset) for s in labels)]
        if unknown:
            covered = dict.fromkeys(s.dataset for s in labels)
            raise GraphfedError(f"preset {preset.name} covers {', '.join(covered)}, "
                                f"not {unknown}")
        labels = list(dict.fromkeys(s for d in datasets for s in labels
                                    if same_dataset(d, s.dataset)))  # in the order asked
    if settings:
        labels = keep_matching(labels, settings, preset.setting_keys)
    return chosen, [s.label for s in labels]


def fold_axis(preset: Preset, folds: int | None) -> list[int | None]:
    """The folds each (method, setting) runs: ``0 .. folds-1`` (all the preset's by default),
    or one run with no fold for a preset without the axis."""
    if not preset.folds:
        if folds is not None:
            raise GraphfedError(f"--folds: preset {preset.name} has no fold axis")
        return [None]
    count = preset.folds if folds is None else folds
    if not 1 <= count <= preset.folds:
        raise GraphfedError(f"--folds {count}: preset {preset.name} has folds 1 .. "
                            f"{preset.folds}")
    return list(range(count))


def cell_config(preset: Preset, variant: Variant, dataset: str, seeds: list[int],
                quick: bool, fairness_on: str = "local", overrides: tuple[str, ...] = (),
                fold: int | None = None) -> ExperimentConfig:
    """The cell's config: ``PINNED``, the paper's protocol, the dataset's, the setting label's and
    the row's settings, the fold, then ``--quick`` and the caller's own ``overrides`` (e.g.
    fewer rounds, ``engine=auto``), which win."""
    setting = parse_label(dataset, preset.setting_keys)
    extra = ["client_global_eval=true"] if fairness_on == "global" else []
    folded = [] if fold is None else [f"partition.fold={fold}"]
    settings = [*PINNED, *preset.base, *extra, f"dataset={setting.dataset}",
                 *preset.dataset_overrides.get(setting.dataset, []),
                 *setting.overrides(preset.setting_keys),
                 f"algorithm={variant.algorithm or 'local'}", *variant.overrides,
                 *preset.cell_overrides.get((variant.method, setting.dataset), []), *folded,
                 *(preset.quick if quick else []), *overrides, f"seeds={seeds}",
                 f"name={run_name(variant, setting, fold)}"]
    return load_config(None, settings)


def run_name(variant: Variant, setting: Setting, fold: int | None) -> str:
    return f"{variant.method}-{setting.folder}" + ("" if fold is None else f"-fold{fold}")


def plan_cells(preset: Preset, variants: list[Variant], labels: list[str], seeds: list[int],
               folds: list[int | None], quick: bool, fairness_on: str,
               overrides: tuple[str, ...]) -> list[Cell]:
    """Every cell of ``labels`` x ``variants`` x ``folds``, each config checked before any cell
    runs (a bad override is one error, not a failure hours in)."""
    try:
        return [Cell(variant, label, cell_config(preset, variant, label, seeds, quick,
                                                 fairness_on, overrides, fold), fold)
                for label in labels for variant in variants for fold in folds]
    except ConfigError as e:
        raise GraphfedError(f"preset {preset.name}: {e}") from None


def keeps_its_seeds(path: Path, config: ExperimentConfig) -> bool:
    """Whether the run directory ``path`` can serve ``config``: it holds the same config but for
    ``KEPT_ACROSS`` (then it is made to hold ``config`` itself, its summary dropped if they
    changed); otherwise whatever is there is removed."""
    wanted = config.to_dict()
    saved = _saved_config(path) if (path / "config.yaml").is_file() else None
    if saved is None or _but_kept(saved) != _but_kept(wanted):
        if path.exists():
            shutil.rmtree(path)
        return False
    if saved != wanted:
        (path / "summary.json").unlink(missing_ok=True)
        (path / "config.yaml").write_text(yaml.safe_dump(wanted, sort_keys=False))
    return True


def _but_kept(config: dict) -> dict:
    return {k: v for k, v in config.items() if k not in KEPT_ACROSS}


def _saved_config(path: Path) -> dict | None:
    """A run's config as this version resolves it (new options take their defaults); None
    for one this version refuses or cannot read, whose cell then runs again."""
    try:
        return load_config(path / "config.yaml").to_dict()
    except ConfigError:
        return None


def seeds_to_train(cell: Cell, runs: Path) -> list[int]:
    """Make the cell's directory hold its config (a cell whose config differs beyond its seeds
    starts afresh) and return the seeds it has not finished."""
    path = runs / cell.config.name
    if not keeps_its_seeds(path, cell.config):
        path.mkdir(parents=True)
        (path / "config.yaml").write_text(yaml.safe_dump(cell.config.to_dict(), sort_keys=False))
    return [s for s in cell.config.run_seeds
            if not (path / f"seed-{s}" / "summary.json").is_file()]
