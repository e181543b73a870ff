"""A group's training recorded once as a CUDA graph and replayed every round.

On a GPU a batched round of small clients is bound by the host: a few hundred operations, each
dispatched by Python and launched on its own, for arithmetic the device does in microseconds
(``benchmarks/round_ops.py``). A CUDA graph records the kernels of one call and replays them
with one launch. A replay repeats the recorded kernels with the recorded arguments, so it is the
eager call only when that call would dispatch the same operations with the same scalars, read
its inputs from the same memory, never wait on the device and draw nothing from a global
stream. ``Replay`` holds a step to those rules, which are checked, not assumed:
``_Recorder`` refuses what a graph cannot hold (host reads, tensors from host data, the global
RNG, shapes that depend on data), and on the CPU, which has no graphs, ``CHECK_ON_CPU`` makes
every "replay" run eagerly and compare, operation by operation, what it dispatches and the
memory it reads with what the recording saw, so the tests prove a step replayable without a
GPU.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

log = logging.getLogger(__name__)

# the tests' switch: on the CPU, emulate replays (run eagerly, checked against the recording)
CHECK_ON_CPU = False
# calls run eagerly before one is recorded: a set of clients seen once may never come back
EAGER_CALLS = 1

_UNSAFE = getattr(torch.Tag, "cudagraph_unsafe", None)  # a tag newer torch has

T = TypeVar("T")
# an operation as a recording describes it (``_Recorder``): its name, its arguments' and its
# keyword arguments' descriptions (nested tuples, compared whole)
Operation = tuple[str, object, object]
# where a tensor's values live (``_memory``)
Memory = tuple[str, int]


class ReplayError(RuntimeError):
    """A step that a recording cannot replay faithfully, and why."""


def available(device: torch.device) -> bool:
    """Whether steps on ``device`` can be recorded: CUDA's graphs, or the CPU's checked
    emulation where the tests ask for it."""
    return device.type == "cuda" or (device.type == "cpu" and CHECK_ON_CPU)


class Replay(Generic[T]):
    """``run()`` (a step reading only tensors that live across calls, its "static inputs",
    and returning tensors) called through a recording: eagerly for the first ``EAGER_CALLS``
    calls, then recorded once and replayed. ``load()``, given at every call, writes the call's
    inputs into the static ones; it runs outside the recording. The tensors a replay returns
    are the recording's own, overwritten by the next call: read or copy them before it. If
    recording fails, the reason is logged once and every later call runs eagerly."""

    def __init__(self, run: Callable[[], T], device: torch.device):
        self.run, self.device = run, device
        self.calls = 0
        self.refused: str | None = None
        self._graph: torch.cuda.CUDAGraph | None = None
        self._outputs: T | None = None
        self._recorded: list[Operation] | None = None  # the emulation's, to compare with
        self._kept: dict[Memory, Tensor] = {}  # what a recording reads from outside: kept alive

    @property
    def recorded(self) -> bool:
        return self._outputs is not None

    def __call__(self, load: Callable[[], None]) -> T:
        self.calls += 1
        if not self.recorded and (self.refused is not None or self.calls <= EAGER_CALLS):
            load()
            return self.run()
        if not self.recorded:
            try:
                self._record(load)
            except RuntimeError as e:  # a ReplayError, or CUDA's own refusal to capture
                self.refused = str(e).splitlines()[0]
                self._graph, self._outputs, self._recorded, self._kept = None, None, None, {}
                log.warning("batched training replays no recording (%s): it runs eagerly",
                            self.refused)
                load()
                return self.run()
        load()
        return self._replay()

    def _record(self, load: Callable[[], None]) -> None:
        """A checked warm-up call (every refusal raised before its operation runs, so a
        refused step has drawn nothing; libraries' workspaces allocated), then the recorded
        one; neither's results count, as a CUDA recording computes nothing. The first call,
        eager, filled the step's caches (a cache filled here would be recorded)."""
        cuda = self.device.type == "cuda"
        side = torch.cuda.Stream(self.device) if cuda else None
        if side is not None:
            side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side) if side is not None else contextlib.nullcontext():
            load()
            with _Recorder(self.device):
                self.run()
        if side is not None:
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with _Recorder(self.device) as recorder, torch.cuda.graph(graph):
                self._outputs = self.run()
            self._graph = graph
        else:
            with _Recorder(self.device) as recorder:
                self._outputs = self.run()
            self._recorded = recorder.operations
        self._kept = recorder.external

    def _replay(self) -> T:
        assert self._outputs is not None  # reached once recorded: a run returns tensors
        if self._graph is not None:
            self._graph.replay()
            return self._outputs
        # the emulation: eagerly, checked, into the recording's outputs
        with _Recorder(self.device, expected=self._recorded):
            outputs = self.run()
        with torch.no_grad():
            for mine, theirs in zip(tree_flatten(self._outputs)[0], tree_flatten(outputs)[0],
                                    strict=True):
                mine.copy_(theirs)
        return self._outputs


class _Recorder(TorchDispatchMode):
    """Sees every operation a step dispatches: refuses those a graph cannot replay, describes
    each (its name, scalars, and for every tensor read from outside the step the memory it
    reads) and, given ``expected``, the descriptions of a recording, fails on the first that
    differs. Tensors the step itself made are described by shape alone: a graph keeps them in
    its own memory."""

    def __init__(self, device: torch.device, expected: list[Operation] | None = None):
        # torch's TorchDispatchMode.__init__ is unannotated (untyped_calls_exclude does not
        # reach a call through super())
        super().__init__()  # type: ignore[no-untyped-call]
        self.device = device
        self.expected = expected
        self.operations: list[Operation] = []
        self.external: dict[Memory, Tensor] = {}  # a tensor read from outside the step
        self._made: set[Memory] = set()  # the memory the step's operations wrote

    def __torch_dispatch__(self, func: torch._ops.OpOverload, types: tuple[type, ...],
                           args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
                           ) -> object:
        kwargs = kwargs or {}
        refusal = _refusal(func, args, kwargs, self.device)
        if refusal is not None:
            raise ReplayError(f"{func} {refusal}")
        description = (str(func), self._describe(args), self._describe(kwargs))
        position = len(self.operations)
        if self.expected is not None:
            recorded = self.expected[position] if position < len(self.expected) else None
            if recorded != description:
                raise ReplayError(f"operation {position} differs from the recording: "
                                  f"{description} where it recorded {recorded}")
        self.operations.append(description)
        out = func(*args, **kwargs)
        for t in tree_flatten(out)[0]:
            if isinstance(t, Tensor):
                self._made.add(_memory(t))
        return out

    def _describe(self, value: object) -> object:
        if isinstance(value, Tensor):
            shape = (value.dtype, value.layout, tuple(value.shape), value.device.type,
                     tuple(value.stride()) if value.layout == torch.strided else None)
            key = _memory(value)
            if key in self._made:
                return ("made", *shape)
            self.external[key] = value
            return ("read", key, value.storage_offset() if value.layout == torch.strided
                    else 0, *shape)
        if isinstance(value, list | tuple):
            return tuple(self._describe(v) for v in value)
        if isinstance(value, dict):
            return tuple((k, self._describe(v)) for k, v in sorted(value.items()))
        return repr(value)


def _memory(t: Tensor) -> Memory:
    """Where a tensor's values live: its storage's address (strided), else the object (a
    sparse tensor, whose parts the step cannot swap under a graph)."""
    if t.layout == torch.strided:
        return ("storage", t.untyped_storage().data_ptr())
    return ("object", id(t))


def _refusal(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any],
             device: torch.device) -> str | None:
    """Why a graph cannot replay this operation (None: it can)."""
    tags = func.tags
    if torch.Tag.data_dependent_output in tags:
        return "reads a value back to the host (item, tolist, bool)"
    if func in (torch.ops.aten.lift_fresh.default, torch.ops.aten.lift_fresh_copy.default):
        return "makes a tensor from host data (torch.tensor)"
    if torch.Tag.nondeterministic_seeded in tags:
        return "draws from the global random stream"
    if _UNSAFE is not None and _UNSAFE in tags:
        return "is marked unsafe in CUDA graphs"
    tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, Tensor)]
    if torch.Tag.dynamic_output_shape in tags and not (
            func is torch.ops.aten.index.Tensor
            and all(t.dtype not in (torch.bool, torch.uint8) for t in tensors[1:])):
        return "has an output whose shape depends on the data"
    if any(t.device.type != device.type and t.dim() > 0 for t in tensors):
        return "moves data between the host and the device"
    return None
