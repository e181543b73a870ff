"""Partitions: validated options (``options``, the kinds' classes by job in ``base``,
``ratio_options`` and ``planned_options``) and the split functions behind them, one module per
family of splits (``node``, ``graph``, ``label_skew``, ``fedego``) and the ``plan`` they
return."""

from graphfed.data.partition.base import PartitionBase, RatioPartition
from graphfed.data.partition.options import (
    PARTITIONS,
    PartitionOptions,
    check_flip_length,
    check_partition_level,
    check_partition_task,
    parse_partition,
)
from graphfed.data.partition.ratio_options import LouvainPartition

__all__ = ["PARTITIONS", "LouvainPartition", "PartitionBase", "PartitionOptions",
           "RatioPartition", "check_flip_length", "check_partition_level", "check_partition_task",
           "parse_partition"]
