"""Shared local-training machinery: device-resident client data, batches, the trainer."""

from graphfed.training.batches import PreparedClient, prepare_client
from graphfed.training.trainer import OptimizerOptions, Trainer, TrainStats

__all__ = ["OptimizerOptions", "PreparedClient", "TrainStats", "Trainer", "prepare_client"]
