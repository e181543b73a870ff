"""Message <-> Flower RecordDict codec: tensors travel as raw bytes with their exact dtype and
shape (int64, int32, bool survive unchanged), scalars keep their Python type in a ConfigRecord.
"""

from __future__ import annotations

from typing import Any

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from graphfed.protocol import SCALAR_BYTES, Message

TENSORS, SCALARS, CONTROL, METRICS = "tensors", "scalars", "graphfed", "metrics"
STYPE = "graphfed.raw"


def _to_array(t: torch.Tensor) -> Array:
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return Array(dtype=str(t.dtype).removeprefix("torch."), shape=tuple(t.shape), stype=STYPE,
                 data=data)


def _from_array(array: Array) -> torch.Tensor:
    dtype = getattr(torch, array.dtype)
    if not array.data:
        return torch.empty(tuple(array.shape), dtype=dtype)
    raw = torch.frombuffer(bytearray(array.data), dtype=torch.uint8)
    return raw.view(dtype).reshape(tuple(array.shape)).clone()


def encode(message: Message, control: dict[str, Any]) -> RecordDict:
    """``message`` plus the runtime's control fields (round, phase, config) as a RecordDict."""
    arrays = ArrayRecord(array_dict={k: _to_array(v) for k, v in message.tensors.items()})
    return RecordDict({TENSORS: arrays, SCALARS: ConfigRecord(dict(message.scalars)),
                       CONTROL: ConfigRecord(control)})


def decode(content: RecordDict) -> Message:
    tensors = {k: _from_array(a) for k, a in content.array_records[TENSORS].items()}
    return Message(tensors, dict(content.config_records[SCALARS]))


def control(content: RecordDict) -> dict[str, Any]:
    return dict(content.config_records[CONTROL])


def wire_nbytes(content: RecordDict) -> int:
    """Payload bytes as sent: every array's raw bytes plus 8 per scalar (Message.nbytes' rule)."""
    arrays = content.array_records.get(TENSORS)
    scalars = content.config_records.get(SCALARS)
    return (sum(len(a.data) for a in arrays.values()) if arrays is not None else 0) + (
        SCALAR_BYTES * len(scalars) if scalars is not None else 0)


def encode_metrics(metrics: dict[str, dict]) -> RecordDict:
    """Per-split evaluation metrics, flattened to ``split.key`` in a MetricRecord."""
    flat = {f"{split}.{key}": value for split, values in metrics.items()
            for key, value in values.items()}
    return RecordDict({METRICS: MetricRecord(flat)})


def decode_metrics(content: RecordDict) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name, value in content.metric_records[METRICS].items():
        split, key = name.split(".", 1)
        out.setdefault(split, {})[key] = value
    return out
