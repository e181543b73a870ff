"""Every registered preset: the modules of ``reproduce.papers`` imported once, by discovery."""

from __future__ import annotations

import importlib
import pkgutil

from graphfed.errors import GraphfedError
from graphfed.reproduce import papers
from graphfed.reproduce.preset import REGISTRY, Preset


def load_presets() -> dict[str, Preset]:
    """Import each paper module (which registers its presets); the registry, by name."""
    for module in pkgutil.iter_modules(papers.__path__):
        importlib.import_module(f"{papers.__name__}.{module.name}")
    return REGISTRY


def get_preset(name: str) -> Preset:
    presets = load_presets()
    if name not in presets:
        raise GraphfedError(f"unknown preset '{name}'; available: {', '.join(sorted(presets))}")
    return presets[name]
