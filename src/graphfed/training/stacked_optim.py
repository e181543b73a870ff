"""Adam and SGD over stacked per-client parameters ``[K, ...]``, a step masked per client.

Both optimizers are element-wise, so one update of the stack is each client's own update; the
mask lets a client without a batch at this step (fewer mini-batches than its neighbours) skip
it, its moments and step count untouched. The arithmetic is ``torch.optim.Adam``'s and
``torch.optim.SGD``'s (L2 weight decay added to the gradient, Adam's bias corrections per
client step count), so a stacked step equals K separate ones. While every client has stepped
every time (full-batch training, equal mini-batch counts) their step counts agree and the
update runs as PyTorch's own on the stacks (Adam's fused kernel, SGD's single-tensor step),
as the sequential trainer's does.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.optim.adam import adam
from torch.optim.sgd import sgd

from graphfed.training.trainer import OptimizerOptions

BETAS, EPS = (0.9, 0.999), 1e-8  # torch.optim.Adam's defaults, which Trainer uses


class StackedOptimizer:
    def __init__(self, options: OptimizerOptions, params: dict[str, Tensor], clients: int):
        self.options = options
        self.params = params
        self.state: dict[str, dict[str, Tensor]] = {k: {} for k in params}
        self.steps = torch.zeros(clients, dtype=torch.float64,
                                 device=next(iter(params.values())).device)
        self.lockstep = True  # every client has taken every step so far

    @torch.no_grad()
    def step(self, active: Tensor | None = None) -> None:
        """One update of every client whose ``active`` entry is true (``active``: ``[K]`` bool;
        None: every client)."""
        o = self.options
        if active is None:
            self.steps += 1
            if self.lockstep:
                if o.name == "adam":
                    self._fused_adam()
                else:
                    self._lockstep_sgd()
                return
            active = torch.ones(len(self.steps), dtype=torch.bool, device=self.steps.device)
        else:
            self.steps += active
            self.lockstep = False
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

    def _fused_adam(self) -> None:
        """Every client's Adam step at once, their step counts equal: the fused kernel on the
        stacks (its own step counter per stack, in step with ``self.steps``)."""
        o = self.options
        names = self._stepped()
        states = [self._moments(self.state[n], self.params[n]) for n in names]
        for state in states:
            state.setdefault("step", torch.zeros((), device=self.steps.device))
        adam([self.params[n] for n in names], [self.params[n].grad for n in names],
             [s["m"] for s in states], [s["v"] for s in states], [],
             [s["step"] for s in states], fused=True, amsgrad=False, beta1=BETAS[0],
             beta2=BETAS[1], lr=o.lr, weight_decay=o.weight_decay, eps=EPS, maximize=False)

    def _lockstep_sgd(self) -> None:
        """Every client's SGD step at once, unmasked: torch's single-tensor update on the
        stacks, the sequential trainer's arithmetic (on FairGFL's 40 Cora clients the masked
        update with its copies of the [40, 1433, 256] stack took a third of a batched
        round)."""
        o = self.options
        names = self._stepped()
        buffers = [self.state[n].get("buf") for n in names]
        sgd([self.params[n] for n in names], [self.params[n].grad for n in names], buffers,
            foreach=False, weight_decay=o.weight_decay, momentum=o.momentum, lr=o.lr,
            dampening=0.0, nesterov=False, maximize=False)
        for name, buffer in zip(names, buffers, strict=True):
            if buffer is not None:
                self.state[name]["buf"] = buffer

    def _stepped(self) -> list[str]:
        """The stacks this step updates: those that received a gradient."""
        return [n for n, p in self.params.items() if p.grad is not None]

    @staticmethod
    def _moments(state: dict[str, Tensor], like: Tensor) -> dict[str, Tensor]:
        """Adam's first and second moments of one stack, zero before its first step."""
        if "m" not in state:
            state["m"], state["v"] = torch.zeros_like(like), torch.zeros_like(like)
        return state

    def _adam(self, state: dict[str, Tensor], grad: Tensor, on: Tensor, shape) -> Tensor:
        beta1, beta2 = BETAS
        m, v = (self._moments(state, grad)[k] for k in ("m", "v"))
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
