"""Local training and evaluation with one shared model object and parameters swapped in.

Parameters travel as plain ``dict[str, Tensor]``; the model module only supplies the computation
(``torch.func.functional_call``), so no module is deep-copied per client or per round.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast, overload

import torch
from pydantic import BaseModel, Field
from torch import Tensor, nn
from torch.func import functional_call

from graphfed.errors import GraphfedError
from graphfed.linkpred import many_link_metrics
from graphfed.metrics import many_classification_metrics
from graphfed.regression import is_link, many_regression_metrics, mean_loss
from graphfed.tensors import Params
from graphfed.training.batches import (
    AnyBatch,
    EdgeBatch,
    GraphBatch,
    ModelCall,
    NodeBatch,
    PreparedClient,
    PreparedGraphClient,
)
from graphfed.validation import OPTIONS

# a loss term on the live parameters (e.g. a proximal term)
PlainLoss = Callable[[Params], Tensor]


class LossSeeingTerm(Protocol):
    """A loss term marked ``sees_loss``: the trainer passes it the batch's detached loss too."""

    sees_loss: bool

    def __call__(self, live: Params, loss: Tensor, /) -> Tensor: ...


ExtraLoss = PlainLoss | LossSeeingTerm
# (live params, the mini-batch, its embeddings: a graph's, or a node's where the model returns
# them) -> a loss term, for embedding regularisers
BatchLoss = Callable[[Params, NodeBatch | GraphBatch, Tensor], Tensor]
# (live params, the mini-batch) before the step: reads what a step sees (FedEgo's uploads)
BatchHook = Callable[[Params, object], None]
# (live params) after each epoch, under no_grad: may move them in place, the optimizer's state
# left as it is (the GPFL code's SCAFFOLD correction, once per epoch)
EpochHook = Callable[[Params], None]
# each split's metrics (``metrics.classification_metrics``) by split name
SplitMetrics = dict[str, dict[str, float]]


class OptimizerOptions(BaseModel):
    model_config = OPTIONS

    name: Literal["adam", "sgd"] = "adam"
    lr: float = Field(0.01, gt=0.0)
    weight_decay: float = Field(5e-4, ge=0.0)
    momentum: float = Field(0.0, ge=0.0, lt=1.0, description="SGD only")
    persistent: bool = Field(
        False, description="each client keeps its optimizer state (e.g. Adam moments) across "
        "rounds, as the GCFL/FGFL/FedStar code bases do; false: a fresh optimizer every round")


@dataclass
class TrainStats:
    loss: float
    steps: int
    samples: int


def _extra(extra_loss: ExtraLoss, live: Params, loss: Tensor) -> Tensor:
    """The extra term; one marked ``sees_loss`` also gets the batch loss (detached), e.g. to
    adapt its coefficient to it (FedEgo's adaptive FedProx)."""
    # the mark is an attribute's value, which no isinstance reads
    if getattr(extra_loss, "sees_loss", False):
        return cast(LossSeeingTerm, extra_loss)(live, loss.detach())
    return cast(PlainLoss, extra_loss)(live)


def _embedded(batch: AnyBatch) -> NodeBatch | GraphBatch:
    """``batch`` for a ``BatchLoss``, which reads node or graph embeddings: a batch of node
    pairs has none to give."""
    if isinstance(batch, EdgeBatch):
        raise GraphfedError("an embedding regulariser (batch_loss) reads node or graph "
                            "embeddings; the edge level scores node pairs")
    return batch


def _call(model: nn.Module, params: Params) -> ModelCall:
    return lambda m, args, kwargs=None: functional_call(m, params, args, kwargs)


class Trainer:
    """Runs local epochs and evaluation of ``model``'s computation under given parameters."""

    def __init__(self, model: nn.Module, optimizer: OptimizerOptions, num_classes: int,
                 eval_train_split: bool = False):
        self.model = model
        self._first_parameter = next(model.parameters(), None)
        self.optimizer = optimizer
        self.num_classes = num_classes
        self.eval_train_split = eval_train_split

    @property
    def device(self) -> torch.device:
        """Where the model's parameters are: the first one's device, read each time (moving
        the model moves that parameter too), the parameter found once (a walk of the modules,
        which a round asked for a dozen times)."""
        first = self._first_parameter
        return (first if first is not None else next(self.model.parameters())).device

    def initial_params(self) -> Params:
        return {k: v.detach().clone() for k, v in self.model.named_parameters()}

    def make_optimizer(self, params: list[Tensor]) -> torch.optim.Optimizer:
        o = self.optimizer
        if o.name == "adam":
            # fused: one kernel per tensor instead of a dozen element-wise passes (torch >= 2.4
            # on the CPU); the same update up to rounding in the last bit
            return torch.optim.Adam(params, lr=o.lr, weight_decay=o.weight_decay, fused=True)
        return torch.optim.SGD(params, lr=o.lr, weight_decay=o.weight_decay,
                               momentum=o.momentum)

    def train(self, params: Params, data: PreparedClient, epochs: int, batch_size: int | None,
              extra_loss: ExtraLoss | None = None, batch_loss: BatchLoss | None = None,
              memory: dict[str, Any] | None = None, on_batch: BatchHook | None = None,
              on_epoch: EpochHook | None = None) -> tuple[Params, TrainStats]:
        """Train from ``params`` (left untouched) for ``epochs`` on the train split.

        ``extra_loss`` sees the live parameters (e.g. a proximal term); ``batch_loss`` also sees
        the mini-batch and its graph embeddings (e.g. a prototype regulariser); ``on_batch``
        sees each batch and the parameters it is trained under, untouched; ``on_epoch`` may
        move the parameters after each epoch (``EpochHook``). With a persistent
        optimizer its state is read from and written back to ``memory`` (the client's state)."""
        live = {k: v.detach().clone().requires_grad_(True) for k, v in params.items()}
        # by name, so that a persistent state meets the same tensors whatever order a message
        # lists them in (FedLit's server and client list its prototypes at different places)
        optimizer = self.make_optimizer([live[k] for k in sorted(live)])
        kept = memory if self.optimizer.persistent else None
        if kept is not None and "optimizer" in kept:
            optimizer.load_state_dict(kept["optimizer"])
        call = _call(self.model, live)
        self.model.train()
        total, steps, samples = 0.0, 0, 0
        for _ in range(epochs):
            for batch in data.batches("train", batch_size, shuffle=True):
                optimizer.zero_grad(set_to_none=True)
                if on_batch is not None:
                    on_batch(live, batch)
                if batch_loss is None:
                    logits = batch.forward(self.model, call)
                else:
                    logits, embedding = _embedded(batch).forward(self.model, call,
                                                                 with_embedding=True)
                loss = mean_loss(logits, batch.targets)
                objective = loss if extra_loss is None else loss + _extra(extra_loss, live, loss)
                if batch_loss is not None:
                    objective = objective + batch_loss(live, _embedded(batch), embedding)
                objective.backward()
                optimizer.step()
                n = len(batch.targets)
                total += float(loss.detach()) * n
                steps += 1
                samples += n
            if on_epoch is not None:
                with torch.no_grad():
                    on_epoch(live)
        if kept is not None:
            kept["optimizer"] = optimizer.state_dict()
        trained = {k: v.detach() for k, v in live.items()}
        return trained, TrainStats(total / max(samples, 1), steps, samples)

    @torch.no_grad()
    def evaluate(self, params: Params, data: PreparedClient,
                 splits: tuple[str, ...] | None = None) -> SplitMetrics:
        """Per split: accuracy, mean loss, micro/macro F1, the sample count, and the accuracy on
        the samples outside ``data``'s training-majority class (none on a set without training
        samples, such as the global test set).

        ``splits`` defaults to a client's own evaluation: val and test, plus train with
        ``eval_train_split``. Where evaluation draws (sampled neighbourhoods) the train pass runs
        on a fork of the RNG, so what is evaluated after it draws exactly what it drew without;
        elsewhere one pass scores every split."""
        if splits is None and self.eval_train_split and data.evaluation_draws:
            outputs = self.outputs(params, data, ("val", "test"))
            cuda = [self.device] if self.device.type == "cuda" else []
            with torch.random.fork_rng(devices=cuda):
                outputs.update(self.outputs(params, data, ("train",)))
        else:
            outputs = self.outputs(params, data, splits)
        return self.split_metrics(outputs, data)

    @torch.no_grad()
    def outputs(self, params: Params, data: PreparedClient, splits: tuple[str, ...] | None = None
                ) -> dict[str, tuple[Tensor, Tensor]]:
        """(logits, targets) of each of ``splits`` (default: ``own_splits``) under ``params``,
        in evaluation mode."""
        self.model.eval()
        return data.outputs(self.model, _call(self.model, params),
                            self.own_splits if splits is None else splits)

    def split_metrics(self, outputs: dict[str, tuple[Tensor, Tensor]], data: PreparedClient
                      ) -> SplitMetrics:
        """``classification_metrics`` of each split's (logits, targets), the minority taken
        against ``data``'s training-majority class."""
        return self.clients_split_metrics([outputs], [data])[0]

    def clients_split_metrics(self, outputs: list[dict[str, tuple[Tensor, Tensor]]],
                              clients: list[PreparedClient]) -> list[SplitMetrics]:
        """``split_metrics`` of many clients, computed together (``many_classification_metrics``,
        ``many_regression_metrics`` for clients whose targets are standardised real values, or
        ``many_link_metrics`` for scored node pairs): what a batched evaluation scores in one
        pass."""
        pairs = [scored for splits in outputs for scored in splits.values()]
        if any(is_link(target) for _, target in pairs):
            metrics = iter(many_link_metrics(pairs))
            return [{s: next(metrics) for s in splits} for splits in outputs]
        if any(data.target_scale is not None for data in clients):
            metrics = iter(many_regression_metrics(
                [(predictions, target, data.target_scale)
                 for splits, data in zip(outputs, clients, strict=True) if data.target_scale
                 for predictions, target in splits.values()]))
            return [{s: next(metrics) for s in splits} for splits in outputs]
        scored = [(logits, target, data.train_majority)
                  for splits, data in zip(outputs, clients, strict=True)
                  for logits, target in splits.values()]
        metrics = iter(many_classification_metrics(scored, self.num_classes))
        return [{s: next(metrics) for s in splits} for splits in outputs]

    @property
    def own_splits(self) -> tuple[str, ...]:
        """The splits a client's own evaluation scores: val and test, and train with
        ``eval_train_split``."""
        return ("val", "test", "train") if self.eval_train_split else ("val", "test")

    @overload
    def forward(self, params: Params, batch: AnyBatch) -> Tensor: ...

    @overload
    def forward(self, params: Params, batch: GraphBatch, *, with_embedding: Literal[True]
                ) -> tuple[Tensor, Tensor]: ...

    def forward(self, params: Params, batch: AnyBatch, **kwargs: bool
                ) -> Tensor | tuple[Tensor, Tensor]:
        """One differentiable forward pass of ``batch`` under ``params`` (current mode)."""
        if isinstance(batch, EdgeBatch):  # pair logits only (the overloads allow no more)
            return batch.forward(self.model, _call(self.model, params))
        return batch.forward(self.model, _call(self.model, params), **kwargs)

    @torch.no_grad()
    def embed(self, params: Params, data: PreparedGraphClient, split: str = "train") -> Tensor:
        """Graph embeddings of every graph of ``split`` (eval mode), in split order."""
        self.model.eval()
        return self.forward(params, data.splits[split].all(), with_embedding=True)[1]
