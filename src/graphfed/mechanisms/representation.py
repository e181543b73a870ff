"""The representation a model's output layer reads, captured during an ordinary forward pass.

Representation-level methods (MOON's model-contrastive loss) need, beside the logits, the
hidden vector each logit was computed from, and from the same forward pass (the same dropout
masks). Every graphfed backbone ends in one output layer (a node model's last message-passing
layer, a graph model's readout, FedEgo's classifier) that owns the model's last registered
parameter; a forward pre-hook on that layer records its input, so no backbone needs an extra
output and any of them serves.
"""

from __future__ import annotations

from types import TracebackType

from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle


def output_layer(model: nn.Module) -> nn.Module:
    """The called module that owns ``model``'s last registered parameter (its outermost one
    below ``model`` that is not a container such as ``convs``)."""
    names = [name for name, _ in model.named_parameters()]
    if not names:
        raise ValueError(f"{type(model).__name__} has no parameters, hence no output layer")
    parts = names[-1].split(".")[:-1]
    for depth in range(1, len(parts) + 1):
        module = model.get_submodule(".".join(parts[:depth]))
        if not isinstance(module, nn.ModuleList | nn.ModuleDict):
            return module
    raise ValueError(f"{type(model).__name__}'s last parameter {names[-1]!r} is its own, "
                     "not an output layer's")


class RepresentationTap:
    """While entered, ``last`` holds the input of ``model``'s output layer in its latest forward
    pass (with its autograd history: a loss on it trains the layers below)."""

    def __init__(self, model: nn.Module):
        self.layer = output_layer(model)
        self.last: Tensor | None = None
        self._handle: RemovableHandle | None = None

    def _record(self, module: nn.Module, inputs: tuple[Tensor, ...]) -> None:
        self.last = inputs[0]

    def read(self) -> Tensor:
        """The representation of the latest forward pass."""
        if self.last is None:
            raise RuntimeError("no forward pass ran since the tap was entered")
        return self.last

    def __enter__(self) -> RepresentationTap:
        self._handle = self.layer.register_forward_pre_hook(self._record)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._handle is not None:
            self._handle.remove()
        self._handle, self.last = None, None
