"""Message <-> Flower RecordDict codec: tensors travel as raw bytes with their exact dtype and
shape (int64, int32, bool survive unchanged), scalars keep their Python type in a ConfigRecord.

Decoding trusts nothing in the record: a dtype that is not a tensor dtype, a shape that does not
match the bytes, a missing record or a scalar that is not a number is a ``MessageError``, which
the runtime handles like any malformed reply (the client is dropped for the round).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from graphfed.messages import SCALAR_BYTES, Message, MessageError

TENSORS, SCALARS, CONTROL, METRICS = "tensors", "scalars", "graphfed", "metrics"
STYPE = "graphfed.raw"


def _to_array(t: torch.Tensor) -> Array:
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
    return Array(dtype=str(t.dtype).removeprefix("torch."), shape=tuple(t.shape), stype=STYPE,
                 data=data)


def _from_array(name: str, array: Array) -> torch.Tensor:
    dtype = getattr(torch, str(array.dtype), None)
    shape = tuple(array.shape)
    if not isinstance(dtype, torch.dtype) or not all(
            isinstance(d, int) and d >= 0 for d in shape):
        raise MessageError(f"tensor '{name}' has dtype {array.dtype!r} and shape {shape!r}")
    expected = math.prod(shape) * dtype.itemsize
    if len(array.data) != expected:
        raise MessageError(f"tensor '{name}' has {len(array.data)} bytes; dtype {array.dtype} "
                           f"and shape {shape} need {expected}")
    if not expected:
        return torch.empty(shape, dtype=dtype)
    raw = torch.frombuffer(bytearray(array.data), dtype=torch.uint8)
    return raw.view(dtype).reshape(shape).clone()


def encode(message: Message, control: dict[str, Any]) -> RecordDict:
    """``message`` plus the runtime's control fields (round, phase, config) as a RecordDict."""
    arrays = ArrayRecord(array_dict={k: _to_array(v) for k, v in message.tensors.items()})
    return RecordDict({TENSORS: arrays, SCALARS: ConfigRecord(dict(message.scalars)),
                       CONTROL: ConfigRecord(control)})


def decode(content: RecordDict) -> Message:
    arrays, scalars = content.array_records.get(TENSORS), content.config_records.get(SCALARS)
    if arrays is None or scalars is None:
        raise MessageError("the reply lacks graphfed's tensor or scalar record")
    tensors = {k: _from_array(k, a) for k, a in arrays.items()}
    numbers = dict(scalars)
    odd = sorted(k for k, v in numbers.items() if not isinstance(v, (int, float, bool)))
    if odd:
        raise MessageError(f"scalars {odd} are not numbers")
    return Message(tensors, numbers)


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
    record = content.metric_records.get(METRICS)
    if record is None:
        raise MessageError("the reply lacks graphfed's metric record")
    out: dict[str, dict] = {}
    for name, value in record.items():
        split, dot, key = name.partition(".")
        if not dot or not isinstance(value, (int, float)):
            raise MessageError(f"metric {name!r} is not split.key with a number")
        out.setdefault(split, {})[key] = value
    return out
