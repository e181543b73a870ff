"""The server/client protocol every algorithm implements, and the messages between them.

An algorithm is a pair: a server side, which decides what each client receives and folds the
replies into its state, and a client side, which given a message, its own data and its own
persistent state returns a reply. Only ``Message`` objects (named tensors plus scalars) cross the
boundary, so the same algorithm runs in-process or over a network, and every byte is countable.

The server keeps its state on ``SERVER_DEVICE`` (the CPU, where a network server receives its
bytes); a client computes on its trainer's device. The runtime moves each message onto the
receiver's device, so no algorithm has to ask where a tensor it was sent lives.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, TypeVar

import torch
from pydantic import BaseModel
from torch import Tensor

from graphfed.errors import GraphfedError
from graphfed.mechanisms.robust import AggregationOptions
from graphfed.tensors import Params, move_tensors
from graphfed.training import PreparedClient, Trainer, TrainStats
from graphfed.training.step import LocalStep
from graphfed.validation import OPTIONS

Scalar = int | float | bool
TensorSpec = dict[str, tuple[tuple[int, ...], torch.dtype]]
SCALAR_BYTES = 8
SERVER_DEVICE = torch.device("cpu")
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


def move_messages(messages: dict[int, Message], device: torch.device | str
                  ) -> dict[int, Message]:
    """``Message.to`` for many messages at once: each tensor name whose tensors agree in shape,
    dtype and device crosses in one stacked copy (the receiver gets views of its own copy, one
    per message) instead of one copy per message; anything else moves one by one."""
    moved = {c: Message({}, dict(m.scalars)) for c, m in messages.items()}
    names = {name for m in messages.values() for name in m.tensors}
    with torch.no_grad():  # copies that record no graph: no detach per tensor
        for name in names:
            holders = [c for c, m in messages.items() if name in m.tensors]
            tensors = [messages[c].tensors[name] for c in holders]
            first = tensors[0]
            if len(tensors) > 1 and all(t.shape == first.shape and t.dtype == first.dtype
                                        and t.device == first.device for t in tensors):
                copies = torch.stack(tensors).to(device).unbind(0)
            else:
                copies = [t.to(device, copy=True) for t in tensors]
            for c, copy in zip(holders, copies, strict=True):
                moved[c].tensors[name] = copy
    for c, m in messages.items():  # keep each message's own tensor order
        moved[c].tensors = {name: moved[c].tensors[name] for name in m.tensors}
    return moved


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
    groups: dict[tuple, tuple[list[Tensor], list[K]]] = {}
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


class AlgorithmOptions(BaseModel):
    """Base of each algorithm's options (its config section, e.g. ``fedprox.mu``)."""

    model_config = OPTIONS


@dataclass(frozen=True)
class ClientSize:
    """What the operator knows of a client from the partition it made: its training samples
    (the aggregation weight), its nodes, and its validation and test samples (None where the
    operator did not record them). The server reads sizes from here, never from a reply, so a
    client cannot weigh itself into the model, or into a pooled accuracy, by claiming a
    size."""

    train: int
    nodes: int
    val: int | None = None
    test: int | None = None

    def samples(self, split: Any) -> int | None:
        """The samples of an evaluated ``split`` the partition gave the client; None where the
        server does not know them (the shared global test set, an unrecorded split)."""
        return {"val": self.val, "test": self.test}.get(split)


@dataclass
class Setup:
    """What both sides know before training: the run's shape, not a client's data.

    The server's alone (a client's copy leaves them empty): ``client_sizes``, every client's
    ``ClientSize`` by client id; ``public``, data the server itself holds: the partition's
    public node pool (on ``SERVER_DEVICE``), never a client's; ``overlap_truth``, the
    partition's true overlap ratios (``"node"``/``"link"``, N×N), which only an operator
    simulating the federation knows: used by oracle ablations and to score estimates."""

    level: str
    num_clients: int
    num_classes: int
    initial_params: Params
    options: AlgorithmOptions
    local_epochs: int = 1
    batch_size: int | None = None
    aggregation: AggregationOptions = field(default_factory=AggregationOptions)  # averaging's rule
    local_lr: float | None = None  # the clients' optimizer rate (q-FedAvg's server needs 1/lr)
    client_sizes: tuple[ClientSize, ...] = ()
    public: PreparedClient | None = None
    overlap_truth: dict[str, Tensor] | None = None

    def on(self, device: torch.device | str) -> Setup:
        """This setup with the initial model on ``device`` (the server's copy lives on
        ``SERVER_DEVICE``, each client's on its trainer's device)."""
        return replace(self, initial_params=move_tensors(self.initial_params, device, copy=True))


@dataclass
class ClientContext:
    """A client's own view: its id, data on device, persistent state, cache and the trainer.

    ``state`` is what the paper's client remembers between rounds (its model, optimizer moments,
    a coefficient): it is checkpointed and, on Flower, kept in the node's state. ``cache`` is what
    can be rebuilt from the client's data and ``state`` (ego-trees, a mended graph, a motif
    vocabulary): it lives in this process only and is never checkpointed or serialised, so a
    resumed or restarted client rebuilds it. ``global_test`` is a shared evaluation set handed
    to every client when a run measures each client's model on it (FedEgo's global F1, FGFL's
    fairness on the global test set)."""

    client_id: int
    data: PreparedClient
    state: dict[str, Any]
    trainer: Trainer
    global_test: PreparedClient | None = None
    cache: dict[str, Any] = field(default_factory=dict)


class Server(ABC):
    """Server side. Its state is the attributes named in ``state_keys``: the default
    ``state_dict``/``load_state_dict`` checkpoint exactly those, so a subclass declares what it
    remembers (``state_keys = (*Base.state_keys, "extra")``) instead of writing the pair."""

    state_keys: ClassVar[tuple[str, ...]] = ()

    def __init__(self, setup: Setup):
        self.setup = setup

    def configure_setup(self, clients: list[int]) -> dict[int, Message]:
        """Messages of a one-off exchange before round 1 (e.g. vocabularies, statistics).

        Empty (the default) means the algorithm has no setup phase."""
        return {}

    def setup_reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        """Expected tensor spec and declared scalars (with their ranges) of a setup reply."""
        return None, {}

    def check_setup_reply(self, client: int, message: Message) -> None:
        """Checks of a setup reply beyond ``setup_reply_spec`` (shapes that depend on each
        other, value ranges); raise ``MessageError`` and the reply is dropped like a malformed
        one."""
        return None

    def aggregate_setup(self, replies: dict[int, Message]) -> None:
        return None

    @abstractmethod
    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        """The message each sampled client receives this round."""

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        """Expected tensor spec of a client's fit reply (None: any tensors) and its declared
        scalars, each with its range (``fit_scalars``): a reply with a scalar not declared, or
        out of its range, is dropped at the boundary."""
        return None, fit_scalars()

    def check_reply(self, client: int, message: Message) -> None:
        """Checks of a fit reply beyond names and shapes (e.g. values that must sum to 1);
        raise ``MessageError`` and the reply is dropped for the round like a malformed one."""
        return None

    @abstractmethod
    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        """Fold the valid replies (possibly fewer than sampled) into the server state."""

    def configure_evaluate(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        return {c: Message() for c in clients}

    def global_params(self) -> Params | None:
        """The global model, if the algorithm has one (evaluated on the global test set)."""
        return None

    def round_metrics(self) -> dict[str, Any]:
        """Server-side quantities of the last round worth recording (values, payoffs, ...)."""
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.state_keys}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = [key for key in self.state_keys if key not in state]
        if missing:
            raise GraphfedError(f"checkpoint lacks server state {missing}")
        for key in self.state_keys:
            setattr(self, key, state[key])


class Client(ABC):
    """Client side. Stateless itself: whatever persists lives in ``ctx.state``."""

    def __init__(self, setup: Setup):
        self.setup = setup
        self.options = setup.options

    def answer_setup(self, message: Message, ctx: ClientContext) -> Message:
        """Answer the server's setup message (only called when the server has a setup phase)."""
        return Message()

    def local_train(self, params: Params, ctx: ClientContext, extra_loss=None, batch_loss=None,
                    on_epoch=None):
        """The run's local epochs on the client's training data, from ``params``."""
        return ctx.trainer.train(params, ctx.data, self.setup.local_epochs, self.setup.batch_size,
                                 extra_loss, batch_loss, memory=ctx.state, on_epoch=on_epoch)

    @abstractmethod
    def fit(self, message: Message, ctx: ClientContext) -> Message:
        """Local work on the client's own data; returns the reply to the server."""

    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep | None:
        """This fit as a standard local step (plain local epochs, perhaps a proximal term), or
        None where it is not one. A client of an algorithm registered ``batched`` whose fit is
        ``fit_by_step`` answers here, and the batched engine may train its step together with
        other clients' and hand the result to ``finish_step``. Both only describe and wrap the
        step: they draw no random numbers and leave ``message`` as it is (the engine hands
        the clients of a batch one device copy of a message they were all sent)."""
        return None

    def finish_step(self, message: Message, ctx: ClientContext, params: Params,
                    stats: TrainStats) -> Message:
        """The reply (and state update) after this client's ``local_step`` was trained."""
        raise NotImplementedError(f"{type(self).__name__} declares no local step")

    def fit_by_step(self, message: Message, ctx: ClientContext) -> Message:
        """A fit that is ``local_step``, trained alone, then ``finish_step``."""
        step = self.local_step(message, ctx)
        if step is None:
            raise NotImplementedError(f"{type(self).__name__} declares no local step")
        on = replace(ctx, data=step.trains_on(ctx.data))
        params, stats = self.local_train(step.params, on, step.extra_loss())
        return self.finish_step(message, ctx, params, stats)

    @staticmethod
    def reply(tensors: dict[str, Tensor], ctx: ClientContext, stats: TrainStats | None = None,
              **scalars: Scalar) -> Message:
        """A fit reply: ``tensors``, the client's training-sample count, its training loss
        (when it trained) and any further scalars. The server replaces the count with the one
        it knows from the partition (``Setup.client_sizes``); a client states it so that a
        server without the partition (a test, a custom runtime) still weighs replies. Further
        scalars are declared, with their ranges, in the server's ``reply_spec``
        (``fit_scalars``): the boundary drops a reply with an undeclared one."""
        head: dict[str, Scalar] = {NUM_SAMPLES: ctx.data.num_samples("train")}
        if stats is not None:
            head[TRAIN_LOSS] = stats.loss
        return Message(tensors, {**head, **scalars})

    def evaluated_params(self, message: Message, ctx: ClientContext) -> Params | None:
        """The parameters this client deploys, which its ``evaluate`` scores with
        ``evaluate_params``; None where its evaluation is something else (it then overrides
        ``evaluate``). Pure: no state change, no random draws."""
        return None

    def evaluate(self, message: Message, ctx: ClientContext) -> dict[str, dict]:
        """Metrics per split of the model this client would deploy. A client that keeps this
        method lets an engine score its ``evaluated_params`` itself (``evaluates_params``)."""
        params = self.evaluated_params(message, ctx)
        if params is None:
            raise NotImplementedError(f"{type(self).__name__} names no evaluated parameters "
                                      "and does not override evaluate")
        return self.evaluate_params(params, ctx)

    def evaluate_params(self, params: Params, ctx: ClientContext) -> dict[str, dict]:
        """``params`` on the client's val/test splits, and on the shared global test set as
        split ``global`` when the run hands one out."""
        metrics = ctx.trainer.evaluate(params, ctx.data)
        if ctx.global_test is not None:
            metrics["global"] = ctx.trainer.evaluate(params, ctx.global_test, ("test",))["test"]
        return metrics


# what ``Client.evaluate`` returns: for each evaluated split, these metrics in these ranges
EVALUATED_SPLITS = ("val", "test", "train", "global")
METRICS: dict[str, ScalarRange] = {
    "acc": UNIT, "loss": replace(LOSS, nan=True), "macro_f1": UNIT, "micro_f1": UNIT.optional,
    "n": COUNT, "minority_n": COUNT.optional, "minority_acc": UNIT.optional}


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
        if math.isnan(values["loss"]) and values["n"]:
            raise MessageError(f"{where}: the loss of {values['n']} samples is NaN")
        if values.get("minority_n", 0) > values["n"]:
            raise MessageError(f"{where}: more minority samples than samples")


def evaluates_params(client: Client) -> bool:
    """Whether ``client``'s evaluation is ``evaluate_params`` of its ``evaluated_params`` (it
    keeps ``Client.evaluate``), so that an engine may score those parameters its own way."""
    return type(client).evaluate is Client.evaluate
