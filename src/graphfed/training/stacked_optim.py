"""Adam and SGD over stacked per-client parameters ``[K, ...]``, a step masked per client.

Both optimizers are element-wise, so one update of the stack is each client's own update; the
mask lets a client without a batch at this step (fewer mini-batches than its neighbours) skip
it, its moments and step count untouched. The arithmetic is ``torch.optim.Adam``'s and
``torch.optim.SGD``'s (L2 weight decay added to the gradient, Adam's bias corrections per
client step count), so a stacked step equals K separate ones.
"""

from __future__ import annotations

import torch
from torch import Tensor

from graphfed.training.trainer import OptimizerOptions

BETAS, EPS = (0.9, 0.999), 1e-8  # torch.optim.Adam's defaults, which Trainer uses


class StackedOptimizer:
    def __init__(self, options: OptimizerOptions, params: dict[str, Tensor], clients: int):
        self.options = options
        self.params = params
        self.state: dict[str, dict[str, Tensor]] = {k: {} for k in params}
        self.steps = torch.zeros(clients, dtype=torch.float64,
                                 device=next(iter(params.values())).device)

    @torch.no_grad()
    def step(self, active: Tensor) -> None:
        """One update of every client whose ``active`` entry is true (``active``: ``[K]`` bool)."""
        o = self.options
        self.steps += active
        for name, p in self.params.items():
            if p.grad is None:
                continue
            shape = (-1,) + (1,) * (p.dim() - 1)
            on = active.view(shape)
            grad = p.grad + o.weight_decay * p if o.weight_decay else p.grad
            state = self.state[name]
            if o.name == "adam":
                update = self._adam(state, grad, on, shape)
            else:
                update = self._sgd(state, grad, on)
            p.sub_(torch.where(on, update, torch.zeros((), device=p.device, dtype=p.dtype)))

    def _adam(self, state: dict[str, Tensor], grad: Tensor, on: Tensor, shape) -> Tensor:
        beta1, beta2 = BETAS
        m = state.setdefault("m", torch.zeros_like(grad))
        v = state.setdefault("v", torch.zeros_like(grad))
        m.copy_(torch.where(on, torch.lerp(m, grad, 1 - beta1), m))
        v.copy_(torch.where(on, v * beta2 + (1 - beta2) * grad * grad, v))
        steps = self.steps.clamp(min=1)
        correction1 = (1 - beta1 ** steps).to(grad.dtype).view(shape)
        correction2_sqrt = (1 - beta2 ** steps).sqrt().to(grad.dtype).view(shape)
        denom = v.sqrt() / correction2_sqrt + EPS
        return self.options.lr / correction1 * m / denom

    def _sgd(self, state: dict[str, Tensor], grad: Tensor, on: Tensor) -> Tensor:
        momentum = self.options.momentum
        if not momentum:
            return self.options.lr * grad
        # torch.optim.SGD: a client's first step starts its buffer at the gradient
        first = on & (self.steps == 1).view(on.shape)
        buf = state.setdefault("buf", torch.zeros_like(grad))
        buf.copy_(torch.where(first, grad, torch.where(on, momentum * buf + grad, buf)))
        return self.options.lr * buf
