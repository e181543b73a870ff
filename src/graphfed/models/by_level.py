"""The network each task level trains: kept apart from the backbones (``models.gnn``) and the
link predictor (``models.link``), which builds on them."""

from __future__ import annotations

from torch import nn

from graphfed.models.gnn import GraphClassifier, MlpSageClassifier, ModelOptions, NodeClassifier
from graphfed.models.link import LinkPredictor


def build_model(level: str, in_dim: int, num_classes: int, opts: ModelOptions) -> nn.Module:
    """The network of a task level: a node or graph classifier, or at the edge level a link
    predictor (which scores pairs, not classes)."""
    if level == "edge":
        return LinkPredictor(in_dim, opts)
    if level == "node" and opts.name == "mlp_sage":
        return MlpSageClassifier(in_dim, num_classes, opts)
    cls = NodeClassifier if level == "node" else GraphClassifier
    return cls(in_dim, num_classes, opts)
