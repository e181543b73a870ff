"""Models: GNN backbones on PyG layers."""

from graphfed.models.by_level import build_model
from graphfed.models.gnn import GraphClassifier, ModelOptions, NodeClassifier

__all__ = ["GraphClassifier", "ModelOptions", "NodeClassifier", "build_model"]
