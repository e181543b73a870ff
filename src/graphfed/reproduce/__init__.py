"""One-command reproductions of the papers' tables: ``graphfed reproduce NAME``."""

from graphfed.reproduce.catalog import get_preset
from graphfed.reproduce.runner import reproduce

__all__ = ["get_preset", "reproduce"]
