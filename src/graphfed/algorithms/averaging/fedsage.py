"""FedSage as FGFL runs it for graph classification: FedAvg over a GraphSAGE encoder (Zhang et al.,
NeurIPS 2021, without the missing-neighbour generator). The backbone keeps the config's shape
(hidden size, layers, pooling) with SAGE layers in place of the configured ones."""

from __future__ import annotations

from torch import nn

from graphfed.algorithms.averaging.fedavg import FedAvgClient, FedAvgOptions, FedAvgServer
from graphfed.algorithms.registry import Algorithm, register
from graphfed.models.by_level import build_model
from graphfed.models.gnn import ModelOptions
from graphfed.protocol import AlgorithmOptions


def sage_backbone(level: str, in_dim: int, num_classes: int, options: ModelOptions,
                  method_options: AlgorithmOptions | None = None) -> nn.Module:
    return build_model(level, in_dim, num_classes, options.model_copy(update={"name": "sage"}))


FEDSAGE = register(Algorithm(
    "fedsage", FedAvgServer, FedAvgClient, FedAvgOptions,
    family="averaging",
    paper="Zhang et al., NeurIPS 2021 (FedSage)",
    model=sage_backbone,
    batched=True,
    description="FedAvg with a GraphSAGE encoder"))
