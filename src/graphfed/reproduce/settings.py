"""A table's dataset column as a setting label: a dataset and the settings it runs under.

A paper whose table has a column per setting (GPFL's ``NCI1/k=25/alpha=0.5``) labels each one with
its dataset followed by ``key=value`` components; the preset's ``setting_keys`` maps each key to
the config key it sets (``k`` -> ``num_clients``), or to named levels, each a list of overrides
(FairGFL's ``overlap=high`` -> three groups of clients with their own overlap coefficients). A
plain label (``PROTEINS``) is the dataset alone. ``--settings k=25`` keeps the labels whose
components match.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from graphfed.data.datasets import canonical_name, is_present
from graphfed.errors import GraphfedError

SEPARATOR = "/"
# a setting key's target: the config key its value sets, or its named levels' overrides
SettingKeys = Mapping[str, str | Mapping[str, tuple[str, ...]]]


@dataclass(frozen=True)
class Setting:
    label: str  # the table's dataset column
    dataset: str  # the dataset it runs on
    components: tuple[tuple[str, str], ...] = ()  # (key, value as written)

    def overrides(self, keys: SettingKeys) -> list[str]:
        """The config overrides the label stands for."""
        out: list[str] = []
        for key, value in self.components:
            target = keys[key]
            if isinstance(target, str):
                out.append(f"{target}={value}")
            elif value in target:
                out.extend(target[value])
            else:
                raise GraphfedError(f"setting {self.label!r}: {key} is one of "
                                    f"{', '.join(target)}, not {value!r}")
        return out

    @property
    def folder(self) -> str:
        """The label as part of a run directory's name (which has no path separators)."""
        return self.label.replace(SEPARATOR, "_")


def _pair(text: str, where: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or not value.strip():
        raise GraphfedError(f"{where}: {text!r} is not of the form key=value")
    return key.strip(), value.strip()


def _value(text: str) -> Any:
    """A component's value as YAML reads it, so ``alpha=1`` matches ``alpha=1.0``."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def parse_label(label: str, keys: SettingKeys) -> Setting:
    """The setting a label names; a component whose key the preset does not map is refused."""
    dataset, *parts = label.split(SEPARATOR)
    components = tuple(_pair(p, f"setting {label!r}") for p in parts)
    unknown = [k for k, _ in components if k not in keys]
    if unknown:
        raise GraphfedError(f"setting {label!r}: unknown component(s) {unknown}; the preset's "
                            f"setting keys: {', '.join(keys) or 'none'}")
    return Setting(label, dataset, components)


def keep_matching(settings: list[Setting], filters: list[str], keys: SettingKeys
                  ) -> list[Setting]:
    """The settings every ``key=value`` filter matches (a key given twice matches either
    value); a filter with an unknown key, or one that leaves nothing, is refused."""
    wanted: dict[str, list[Any]] = {}
    for item in filters:
        key, value = _pair(item, "--settings")
        if key not in keys:
            raise GraphfedError(f"--settings {item}: unknown setting key {key!r}; choose from: "
                                f"{', '.join(keys) or 'none (this preset has no settings)'}")
        wanted.setdefault(key, []).append(_value(value))
    kept = [s for s in settings
            if all(_value(dict(s.components).get(k, "")) in values
                   for k, values in wanted.items())]
    if not kept:
        raise GraphfedError(f"--settings {' '.join(filters)}: no setting matches; the "
                            f"settings: {', '.join(s.label for s in settings)}")
    return kept


def same_dataset(asked: str, dataset: str) -> bool:
    """Whether a ``--datasets`` name is ``dataset`` (graphfed's spelling rules, and a paper's
    dataset graphfed does not know matched by name)."""
    return _known(asked).casefold() == _known(dataset).casefold()


def _known(name: str) -> str:
    try:
        return canonical_name(name)
    except GraphfedError:
        return name


def missing(dataset: str) -> str | None:
    """Why ``dataset`` cannot run here, or None when it can."""
    try:
        present = is_present(dataset)
    except GraphfedError:
        return f"{dataset}: not a dataset graphfed can load"
    return None if present else f"{dataset}: dataset files not present under GRAPHFED_DATA"


def value_label(keys: SettingKeys, named: tuple[str, ...] = ()) -> Callable[[str], str]:
    """A preset's ``table_label``: a setting label (``Cora/partition=louvain``) as its dataset
    and its components' values (``Cora/louvain``), the components of ``named`` keeping their key
    (``ESOL/scaffold/K=4``)."""
    def shown(label: str) -> str:
        setting = parse_label(label, keys)
        return SEPARATOR.join([setting.dataset, *(f"{k}={v}" if k in named else v
                                                  for k, v in setting.components)])

    return shown
