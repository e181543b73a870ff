"""A model's parameters as layers, input to output: what methods that treat the top layers
apart from the rest read (FedPer's personal head, FedALA's adaptively aggregated top layers).

A layer is the tensors of one module under the model: ``convs.<i>.*`` is message-passing layer
i (GCN's weight and bias, GIN's whole MLP, GAT's attention vectors with them), any other name is
grouped by its first component (``pre``, ``post``, ``readout``, ``reduction``, ``classifier``).
Layers are ordered as the model registers them, which every graphfed network does in the order
its forward pass runs them.
"""

from __future__ import annotations

from collections.abc import Iterable

from graphfed.errors import GraphfedError


def layer_of(name: str) -> str:
    """The layer a parameter belongs to: ``convs.1.lin.weight`` -> ``convs.1``,
    ``readout.bias`` -> ``readout``."""
    parts = name.split(".")
    if len(parts) > 2 and parts[1].isdigit():
        return ".".join(parts[:2])
    return parts[0]


def layers(names: Iterable[str]) -> list[list[str]]:
    """The parameter names grouped by layer, layers in the order their first tensor comes."""
    grouped: dict[str, list[str]] = {}
    for name in names:
        grouped.setdefault(layer_of(name), []).append(name)
    return list(grouped.values())


def top_layers(names: Iterable[str], count: int, leave_one: bool = False) -> list[str]:
    """The names of the top ``count`` layers' tensors (those nearest the output).

    ``GraphfedError`` (one line) where the model has fewer layers, or, with ``leave_one``, no
    layer below them (a method whose shared part would be empty)."""
    grouped = layers(names)
    most = len(grouped) - 1 if leave_one else len(grouped)
    if not 1 <= count <= most:
        raise GraphfedError(f"the model has {len(grouped)} layers "
                            f"({', '.join(layer_of(g[0]) for g in grouped)}): {count} top "
                            f"layers {'leave none below them' if leave_one else 'are too many'}")
    return [name for group in grouped[-count:] for name in group]
