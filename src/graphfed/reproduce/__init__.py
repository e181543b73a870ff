"""One-command reproductions of the papers' tables: ``graphfed reproduce NAME``."""

from graphfed.reproduce.runner import get_preset, reproduce

__all__ = ["get_preset", "reproduce"]
