"""Partition options (validated) and the one entry point that turns a description into them.

A partition is described entirely by its options, the dataset and the number of clients; the same
description always gives the same clients. The options of each kind live by job: what they all
share in ``base``, the kinds that assign items in ``ratio_options``, those that replay a paper's
whole split in ``planned_options``, the field's benchmark protocols in ``protocol_options``.
"""

from __future__ import annotations

from typing import Annotated, get_args

from pydantic import Field, TypeAdapter

from graphfed.data.partition.base import PartitionBase
from graphfed.data.partition.planned_options import (
    FairGFLOverlapPartition,
    FedEgoLabelPartition,
    FedEgoLouvainPartition,
    FedSprayPublishedPartition,
    GCFLCodePartition,
    GPFLDirichletPartition,
    GPFLToyPartition,
    ScaffoldPartition,
)
from graphfed.data.partition.protocol_options import (
    FedPubDisjointPartition,
    FedPubOverlappingPartition,
    OpenFGLLouvainPartition,
    OpenFGLMetisPartition,
)
from graphfed.data.partition.ratio_options import (
    DirichletPartition,
    GCFLChunkPartition,
    LouvainPartition,
    MajorLabelsPartition,
    MetisPartition,
    UniformPartition,
)
from graphfed.errors import GraphfedError

PartitionOptions = Annotated[
    LouvainPartition | MetisPartition | MajorLabelsPartition | DirichletPartition
    | UniformPartition | GCFLChunkPartition | GCFLCodePartition | GPFLDirichletPartition
    | GPFLToyPartition | FedEgoLabelPartition | FedEgoLouvainPartition
    | FedSprayPublishedPartition | FairGFLOverlapPartition | FedPubDisjointPartition
    | FedPubOverlappingPartition | OpenFGLLouvainPartition | OpenFGLMetisPartition
    | ScaffoldPartition,
    Field(discriminator="name"),
]

# every kind by its name, read off the union above so the kinds are listed once
PARTITIONS: dict[str, type[PartitionBase]] = {
    kind.model_fields["name"].default: kind for kind in get_args(get_args(PartitionOptions)[0])}


def check_partition_level(options: PartitionBase, level: str) -> None:
    if level not in options.levels:
        valid = [n for n, c in PARTITIONS.items() if level in c.levels]
        raise GraphfedError(
            f"partition '{options.name}' is for {'/'.join(options.levels)}-level datasets; "
            f"for a {level}-level dataset use one of: {', '.join(valid)}")
    if options.edge_flip is not None and level != "graph":
        raise GraphfedError("partition.edge_flip applies to graph-level datasets only")


def check_partition_task(options: PartitionBase, level: str, task: str, dataset: str) -> None:
    """Refuse, in one line naming those that can, a partition that reads class labels on a
    dataset whose targets are not classes (a regression target is one real value)."""
    if task in options.tasks:
        return
    valid = [n for n, c in PARTITIONS.items() if level in c.levels and task in c.tasks]
    raise GraphfedError(
        f"partition '{options.name}' deals by class labels, but dataset '{dataset}' is a {task} "
        f"task; {level}-level partitions for {task}: {', '.join(valid)}")


def check_flip_length(options: PartitionBase, num_clients: int) -> None:
    if isinstance(options.edge_flip, list) and len(options.edge_flip) != num_clients:
        raise GraphfedError(
            f"partition.edge_flip lists {len(options.edge_flip)} ratios for {num_clients} clients")


def parse_partition(data: dict | str) -> PartitionBase:
    """Validate a partition description (a name, or a dict with ``name``) into its options."""
    if isinstance(data, str):
        data = {"name": data}
    return TypeAdapter(PartitionOptions).validate_python(data)
