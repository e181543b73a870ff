"""Partitions: validated options (``options``) and the split functions behind them, one module
per family of splits (``node``, ``graph``, ``label_skew``, ``fedego``) and the ``plan`` they
return."""

from graphfed.data.partition.options import (
    PARTITIONS,
    LouvainPartition,
    PartitionBase,
    PartitionOptions,
    RatioPartition,
    check_flip_length,
    check_partition_level,
    parse_partition,
)

__all__ = ["PARTITIONS", "LouvainPartition", "PartitionBase", "PartitionOptions",
           "RatioPartition", "check_flip_length", "check_partition_level", "parse_partition"]
