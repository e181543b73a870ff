"""Adam and SGD over stacked per-client parameters ``[K, ...]``, a step masked per client.

Both optimizers are element-wise, so one update of the stack is each client's own update; the
mask lets a client without a batch at this step (fewer mini-batches than its neighbours) skip
it, its moments and step count untouched. The arithmetic is PyTorch's own (``adam``'s fused
kernel, ``sgd``'s single-tensor step: L2 weight decay added to the gradient, Adam's bias
corrections per step count), so a stacked step equals K separate ones. While every client has
stepped every time (full-batch training, equal mini-batch counts) the update runs on the whole
stacks; after that, on the slices of the clients that step, those with one step count at a
time (``_step_clients``): a step that one client of ten takes costs a tenth of the stacks.
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
        if active is None and self.lockstep:
            self.steps += 1
            if self.options.name == "adam":
                self._fused_adam()
            else:
                self._lockstep_sgd()
            return
        if active is None:
            active = torch.ones(len(self.steps), dtype=torch.bool, device=self.steps.device)
        self.lockstep = False
        self.steps += active
        stepping = self.steps[active]
        for count in stepping.unique().tolist():
            self._step_clients(torch.nonzero(active & (self.steps == count)).view(-1), count)

    def _step_clients(self, clients: Tensor, count: float) -> None:
        """The step of ``clients``, each at its ``count``-th step: PyTorch's update on copies of
        their slices of the stacks (params, gradients, moments or momentum), copied back."""
        stepped = self._stepped()
        names = list(stepped)
        params = [self.params[n].index_select(0, clients) for n in names]
        grads = [grad.index_select(0, clients) for grad in stepped.values()]
        if self.options.name == "adam":
            states = [self._moments(self.state[n], self.params[n]) for n in names]
            m = [s["m"].index_select(0, clients) for s in states]
            v = [s["v"].index_select(0, clients) for s in states]
            self._adam(params, grads, m, v,
                       [torch.tensor(count - 1, dtype=torch.float32, device=self.steps.device)
                        for _ in names])
            for state, moment, velocity in zip(states, m, v, strict=True):
                state["m"].index_copy_(0, clients, moment)
                state["v"].index_copy_(0, clients, velocity)
        else:
            # torch's SGD starts a buffer at the first step's gradient: none before it
            buffers = [None if count == 1 or "buf" not in self.state[n]
                       else self.state[n]["buf"].index_select(0, clients) for n in names]
            self._sgd(params, grads, buffers)
            for name, buffer in zip(names, buffers, strict=True):
                if buffer is not None:
                    self.state[name].setdefault(
                        "buf", torch.zeros_like(self.params[name])).index_copy_(0, clients, buffer)
        for name, value in zip(names, params, strict=True):
            self.params[name].index_copy_(0, clients, value)

    def _fused_adam(self) -> None:
        """Every client's Adam step at once, their step counts equal: the fused kernel on the
        stacks (its own step counter per stack, in step with ``self.steps``)."""
        stepped = self._stepped()
        names = list(stepped)
        states = [self._moments(self.state[n], self.params[n]) for n in names]
        for state in states:
            state.setdefault("step", torch.zeros((), device=self.steps.device))
        self._adam([self.params[n] for n in names], list(stepped.values()),
                   [s["m"] for s in states], [s["v"] for s in states],
                   [s["step"] for s in states])

    def _lockstep_sgd(self) -> None:
        """Every client's SGD step at once, unmasked: torch's single-tensor update on the
        stacks, the sequential trainer's arithmetic (on FairGFL's 40 Cora clients the masked
        update with its copies of the [40, 1433, 256] stack took a third of a batched
        round)."""
        stepped = self._stepped()
        names = list(stepped)
        buffers = [self.state[n].get("buf") for n in names]
        self._sgd([self.params[n] for n in names], list(stepped.values()), buffers)
        for name, buffer in zip(names, buffers, strict=True):
            if buffer is not None:
                self.state[name]["buf"] = buffer

    def _adam(self, params: list[Tensor], grads: list[Tensor], m: list[Tensor],
              v: list[Tensor], steps: list[Tensor]) -> None:
        """PyTorch's fused Adam, in place, with the trainer's options (``steps``: each
        tensor's count before this step)."""
        o = self.options
        adam(params, grads, m, v, [], steps, fused=True, amsgrad=False, beta1=BETAS[0],
             beta2=BETAS[1], lr=o.lr, weight_decay=o.weight_decay, eps=EPS, maximize=False)

    def _sgd(self, params: list[Tensor], grads: list[Tensor], buffers: list[Tensor | None]
             ) -> None:
        """PyTorch's single-tensor SGD, in place, with the trainer's options (``buffers``
        filled in where a first step starts one)."""
        o = self.options
        sgd(params, grads, buffers, foreach=False, weight_decay=o.weight_decay,
            momentum=o.momentum, lr=o.lr, dampening=0.0, nesterov=False, maximize=False)

    def _stepped(self) -> dict[str, Tensor]:
        """The stacks this step updates, by name: those that received a gradient, and it."""
        return {n: p.grad for n, p in self.params.items() if p.grad is not None}

    @staticmethod
    def _moments(state: dict[str, Tensor], like: Tensor) -> dict[str, Tensor]:
        """Adam's first and second moments of one stack, zero before its first step."""
        if "m" not in state:
            state["m"], state["v"] = torch.zeros_like(like), torch.zeros_like(like)
        return state
