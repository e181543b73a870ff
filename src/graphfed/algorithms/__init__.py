"""Federated algorithms, grouped by the family they extend, and the published methods as packages.

``averaging/`` (one global model), ``personalized/`` (each client keeps its own), ``clustered/``
(a model per cluster) and ``rewards/`` (gradient rewards by contribution) hold the families'
bases and their members; ``fgfl/`` and ``fedego/`` are paper packages. Every algorithm registers
itself (``registry.register``) at the foot of its module; ``get_algorithm`` imports only the
module a name lives in.
"""

from graphfed.algorithms.registry import REGISTRY, Algorithm, get_algorithm, load_all, register

__all__ = ["REGISTRY", "Algorithm", "get_algorithm", "load_all", "register"]
