"""The messages between a server and its clients, and the boundary's checks on them.

Only ``Message`` objects (named tensors plus scalars) cross between the parties. Every reply is
checked here before the server reads it: tensor names, shapes, dtypes and kinds (dense real
tensors only), finite values, and every scalar against the range the algorithm declares for it
(``ScalarRange`` in its reply spec), every evaluation metric against its own (``METRICS``). A
reply that fails raises ``MessageError`` and is dropped for the round: the server believes no
number an honest client could not have sent.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import torch
from torch import Tensor

from graphfed.errors import GraphfedError
from graphfed.linkpred import RANKING
from graphfed.tensors import move_tensors

Scalar = int | float | bool

TensorSpec = dict[str, tuple[tuple[int, ...], torch.dtype]]

SCALAR_BYTES = 8

K = TypeVar("K")

FLOAT32_MAX = float(torch.finfo(torch.float32).max)

# the reply scalars the shared round logic reads by name
NUM_SAMPLES = "num_samples"  # training samples behind a client's update (aggregation weight)

TRAIN_LOSS = "train_loss"  # mean training loss of the client's local epochs (recorded per round)

class MessageError(GraphfedError):
    """A message that fails the boundary check (names, types, shapes, dtypes, ranges)."""

@dataclass(frozen=True)
class ScalarRange:
    """The values one scalar a client sends may take, declared beside its name in a reply spec
    so that the boundary refuses a number no honest client could send: a finite real number in
    [``low``, ``high``], an integer with ``integer``; ``required`` ones must be present; ``nan``
    also allows NaN (a mean over no sample, such as the loss of an empty split)."""

    low: float = -math.inf
    high: float = math.inf
    integer: bool = False
    required: bool = True
    nan: bool = False

    @property
    def optional(self) -> ScalarRange:
        """This range for a scalar a reply may leave out."""
        return replace(self, required=False)

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is not in this range (not a real number that fits a float, NaN,
        infinite, not an integer, out of bounds); None when it is."""
        if not isinstance(value, (int, float)):  # a bool is an int
            return f"is a {type(value).__name__}, not a number"
        try:
            number = float(value)
        except (OverflowError, TypeError, ValueError):
            return "does not fit a float"
        if math.isnan(number):
            return None if self.nan else "is NaN"
        if math.isinf(number):
            return "is infinite"
        if self.integer and not isinstance(value, int):
            return "is not an integer"
        if not self.low <= number <= self.high:
            return f"is outside [{self.low:g}, {self.high:g}]"
        return None

ScalarSpec = Mapping[str, ScalarRange]

REAL = ScalarRange()  # any finite real number

COUNT = ScalarRange(0, integer=True)  # samples, items, rounds: a non-negative integer

# a loss, a privacy budget: finite and non-negative; a loss computed in float32 is at most its
# largest value, so a claim above it is no loss a client computed
LOSS = ScalarRange(0.0, FLOAT32_MAX)

UNIT = ScalarRange(0.0, 1.0)  # an accuracy, an F1 score, a share

FLAG = ScalarRange(0, 1, integer=True)  # a yes/no (a bool, or 0 or 1)

# what ``Client.reply`` writes in every fit reply; ``fit_scalars`` adds an algorithm's own
FIT_SCALARS: dict[str, ScalarRange] = {NUM_SAMPLES: COUNT, TRAIN_LOSS: LOSS.optional}

def fit_scalars(extra: ScalarSpec | None = None) -> dict[str, ScalarRange]:
    """The scalars of a fit reply made by ``Client.reply``: ``FIT_SCALARS`` and ``extra``, the
    algorithm's own, each with its range."""
    return {**FIT_SCALARS, **(extra or {})}

def shown(value: Any) -> str:
    """``value`` for a log line or an error, short whatever a peer sent (a Python integer of
    thousands of digits has no printable repr)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**30:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except Exception:  # a peer's object whose repr fails is still refused, not a crash
        return f"a {type(value).__name__}"
    return text if len(text) <= 80 else text[:77] + "..."

def check_scalars(scalars: Mapping[str, Any], declared: ScalarSpec | None, sender: str) -> None:
    """Raise MessageError unless every scalar is declared and in its range and every required
    one is present; ``declared`` None: any names, each a finite real number."""
    for name, value in scalars.items():
        rule = REAL if declared is None else declared.get(name)
        if rule is None:
            raise MessageError(f"{sender}: undeclared scalar {shown(name)}")
        why = rule.problem(value)
        if why is not None:
            raise MessageError(f"{sender}: scalar '{name}' {why} ({shown(value)})")
    missing = [] if declared is None else [
        name for name, rule in declared.items() if rule.required and name not in scalars]
    if missing:
        raise MessageError(f"{sender}: missing scalars {missing}")

def tensor_problem(tensor: Any) -> str | None:
    """Why ``tensor`` is no tensor the server can read (not a tensor, sparse, nested, without
    data, complex or quantized values); None for a dense strided one of real values."""
    if type(tensor) not in (Tensor, torch.nn.Parameter):
        return f"is a {type(tensor).__name__}, not a tensor"
    if tensor.is_nested or tensor.layout != torch.strided:
        return f"is a {'nested' if tensor.is_nested else tensor.layout} tensor, not a dense one"
    if tensor.is_meta:
        return "is a meta tensor, without values"
    if tensor.is_complex() or tensor.is_quantized:
        return f"has dtype {tensor.dtype}, not real numbers"
    return None

@dataclass
class Message:
    """What crosses the client/server boundary: named tensors and named scalars."""

    tensors: dict[str, Tensor] = field(default_factory=dict)
    scalars: dict[str, Scalar] = field(default_factory=dict)

    @property
    def nbytes(self) -> int:
        """Payload bytes: each tensor's ``numel * element_size`` plus 8 bytes per scalar."""
        return (sum(t.numel() * t.element_size() for t in self.tensors.values())
                + SCALAR_BYTES * len(self.scalars))

    def spec(self) -> TensorSpec:
        return spec_of(self.tensors)

    def to(self, device: torch.device | str) -> Message:
        """A copy with every tensor on ``device``: the receiver shares no tensor with the
        sender, whatever device either computes on."""
        return Message(move_tensors(self.tensors, device, copy=True), dict(self.scalars))

def spec_of(tensors: dict[str, Tensor]) -> TensorSpec:
    return {k: (tuple(v.shape), v.dtype) for k, v in tensors.items()}

def check_message(message: Message, expected: TensorSpec | None = None,
                  scalars: ScalarSpec | None = None, sender: str = "message",
                  finite: bool | None = None) -> None:
    """Raise MessageError unless ``message`` is well formed and matches ``expected`` (tensor
    names, shapes, dtypes) and ``scalars`` (the declared scalars and their ranges; None: any
    finite real numbers). ``finite``: whether the caller found its floating-point tensors
    finite in one pass over many messages (``finite_messages``, or the runtime's update
    norms); None checks here."""
    if not isinstance(message, Message):
        raise MessageError(f"{sender}: expected a Message, got {type(message).__name__}")
    if not isinstance(message.tensors, dict) or not isinstance(message.scalars, dict):
        raise MessageError(f"{sender}: tensors and scalars must be dicts")
    for name in [*message.tensors, *message.scalars]:
        if not isinstance(name, str):
            raise MessageError(f"{sender}: a name is a {type(name).__name__}, not a str")
    for name, t in message.tensors.items():
        why = tensor_problem(t)
        if why is not None:
            raise MessageError(f"{sender}: '{name}' {why}")
    if finite is None:
        finite = bool(finite_messages({sender: message}))
    if not finite:  # a non-finite norm: find the culprit, if any
        for name, t in message.tensors.items():
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise MessageError(f"{sender}: '{name}' has NaN or infinite values")
    check_scalars(message.scalars, scalars, sender)
    if expected is None:
        return
    got = message.spec()
    if set(got) != set(expected):
        extra, absent = sorted(set(got) - set(expected)), sorted(set(expected) - set(got))
        raise MessageError(f"{sender}: tensor names differ (unexpected {extra}, missing {absent})")
    for name, (shape, dtype) in expected.items():
        if not _shape_fits(got[name][0], shape) or got[name][1] != dtype:
            raise MessageError(f"{sender}: '{name}' is {got[name][0]} {got[name][1]}, "
                               f"expected {shape} {dtype}")

def finite_messages(messages: Mapping[K, Any]) -> set[K]:
    """The keys of the ``messages`` (Messages, or anything a peer sent) whose floating-point
    tensors all have a finite L1 norm: one ``_foreach_norm`` over every tensor of every
    message per device and dtype, and one read of the norms, where a check per message costs
    a reduction per tensor and a device read per message. A NaN or infinity anywhere makes its
    norm non-finite. Finite values overflow the norm only near the float32 range (norms of
    narrower types are taken in float32); ``check_message`` then looks element by element."""
    groups: dict[tuple[torch.device, torch.dtype], tuple[list[Tensor], list[K]]] = {}
    senders = {key for key, m in messages.items() if readable(m)}
    for key in senders:
        for t in messages[key].tensors.values():
            if t.is_floating_point() and t.numel():
                tensors, owners = groups.setdefault((t.device, t.dtype), ([], []))
                tensors.append(t)
                owners.append(key)
    failed: set[K] = set()
    for (_, dtype), (tensors, owners) in groups.items():
        if torch.finfo(dtype).bits < 32:  # a half-precision norm overflows at 65,504
            tensors = [t.float() for t in tensors]
        norms = torch.stack(torch._foreach_norm(tensors, 1)).tolist()  # judged on the host
        failed.update(key for key, norm in zip(owners, norms, strict=True)
                      if not math.isfinite(norm))
    return senders - failed

def readable(message: Any) -> bool:
    """Whether ``message`` is a Message whose tensors the server can compute on (each passes
    ``tensor_problem``): what a pass over many messages' values may take in, before the
    boundary check names what is wrong with the others."""
    return (isinstance(message, Message) and isinstance(message.tensors, dict)
            and all(tensor_problem(t) is None for t in message.tensors.values()))

def _shape_fits(got: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    """``expected`` may hold -1 for a dimension of any size (e.g. a variable number of items)."""
    return len(got) == len(expected) and all(
        e in (-1, g) for g, e in zip(got, expected, strict=True))

# what ``Client.evaluate`` returns: for each evaluated split, these metrics in these ranges
EVALUATED_SPLITS = ("val", "test", "train", "global")

METRICS: dict[str, ScalarRange] = {
    "acc": UNIT.optional, "loss": replace(LOSS, nan=True), "macro_f1": UNIT.optional,
    "micro_f1": UNIT.optional, "n": COUNT, "minority_n": COUNT.optional,
    "minority_acc": UNIT.optional, "roc_auc": UNIT.optional,
    # a regression client's errors, in its target's units (``graphfed.regression``)
    "mae": LOSS.optional, "rmse": LOSS.optional,
    # a link predictor's ranking of its split's pairs (``graphfed.linkpred``)
    **{key: UNIT.optional for key in RANKING}}
# each task's metrics, every one of which an evaluated split of that task carries
CLASSIFICATION_METRICS, REGRESSION_METRICS = ("acc", "macro_f1"), ("mae", "rmse")
LINK_METRICS = RANKING

def check_metrics(metrics: Any, sender: str) -> None:
    """Raise MessageError unless ``metrics`` is an evaluate reply: for some of
    ``EVALUATED_SPLITS``, the ``METRICS`` in their ranges, a NaN loss only where the split has
    no sample (the mean over nothing ``metrics.classification_metrics`` reports), and no more
    minority samples than samples. Every number in it is the client's claim; this bounds what
    a claim can do to a summary."""
    if not isinstance(metrics, dict):
        raise MessageError(f"{sender}: metrics are a {type(metrics).__name__}, not a dict")
    for split, values in metrics.items():
        if split not in EVALUATED_SPLITS or not isinstance(values, dict):
            raise MessageError(f"{sender}: {shown(split)} is no evaluated split with metrics")
        where = f"{sender}, split {split}"
        check_scalars(values, METRICS, where)
        task = next((metrics for metrics in (REGRESSION_METRICS, LINK_METRICS)
                     if any(k in values for k in metrics)), CLASSIFICATION_METRICS)
        missing = [key for key in task if key not in values]
        if missing:
            raise MessageError(f"{where}: missing scalars {missing}")
        if math.isnan(values["loss"]) and values["n"]:
            raise MessageError(f"{where}: the loss of {values['n']} samples is NaN")
        if values.get("minority_n", 0) > values["n"]:
            raise MessageError(f"{where}: more minority samples than samples")
