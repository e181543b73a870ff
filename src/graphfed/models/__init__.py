"""Models: GNN backbones on PyG layers."""

from graphfed.models.gnn import GraphClassifier, ModelOptions, NodeClassifier, build_model

__all__ = ["GraphClassifier", "ModelOptions", "NodeClassifier", "build_model"]
