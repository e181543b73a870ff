"""Shared local-training machinery: device-resident client data, batches, the trainer."""

from graphfed.training.batches import PreparedClient, prepare_client
from graphfed.training.trainer import OptimizerOptions, Params, Trainer, TrainStats, move_tensors

__all__ = ["OptimizerOptions", "Params", "PreparedClient", "TrainStats", "Trainer",
           "move_tensors", "prepare_client"]
