"""The server/client protocol every algorithm implements: the server and client sides, their
set-up and their contexts (the messages between them and the boundary's checks on those are
``graphfed.messages``).

An algorithm is a pair: a server side, which decides what each client receives and folds the
replies into its state, and a client side, which given a message, its own data and its own
persistent state returns a reply. Only ``Message`` objects (named tensors plus scalars) cross the
boundary, so the same algorithm runs in-process or over a network, and every byte is countable.

The server keeps its state on ``SERVER_DEVICE`` (the CPU, where a network server receives its
bytes); a client computes on its trainer's device. The runtime moves each message onto the
receiver's device, so no algorithm has to ask where a tensor it was sent lives.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

import torch
from pydantic import BaseModel
from torch import Tensor, nn

from graphfed.errors import GraphfedError
from graphfed.mechanisms.robust import AggregationOptions
from graphfed.messages import (
    NUM_SAMPLES,
    TRAIN_LOSS,
    Message,
    Scalar,
    ScalarSpec,
    TensorSpec,
    fit_scalars,
)
from graphfed.privacy.ledger import Release
from graphfed.privacy.options import DPRun
from graphfed.privacy.secure_aggregation import SecureAggregationOptions
from graphfed.tensors import Params, move_tensors
from graphfed.training import OptimizerOptions, PreparedClient, Trainer, TrainStats
from graphfed.training.batches import PreparedGraphClient, PreparedNodeClient
from graphfed.training.step import LocalStep
from graphfed.training.trainer import BatchLoss, EpochHook, ExtraLoss, SplitMetrics
from graphfed.validation import OPTIONS

SERVER_DEVICE = torch.device("cpu")
TRAINED = "scored.trained"  # ctx.state: the latest local step's parameters (client_eval=trained)


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
    """What both sides know before training: the run's shape, not a client's data, and only
    facts any algorithm may read (a method's own facts travel in its options, its set-up
    exchange, or its server's ``Algorithm.server_inputs``).

    ``optimizer`` is what the clients train with (the run's, or the algorithm's own rule's).
    ``network`` is the run's network (parameters swapped in by ``functional_call``), for a
    server that runs the model itself (FedTAD distils on it); None in a bare Setup.
    The server's alone (a client's copy leaves it empty): ``client_sizes``, every client's
    ``ClientSize`` by client id."""

    level: str
    num_clients: int
    num_classes: int
    initial_params: Params
    options: AlgorithmOptions
    local_epochs: int = 1
    batch_size: int | None = None
    aggregation: AggregationOptions = field(default_factory=AggregationOptions)  # averaging's rule
    dp: DPRun | None = None  # DP-FedAvg in place of the averaging rule (``graphfed.privacy``)
    secure_aggregation: SecureAggregationOptions | None = None  # SecAgg+ of the fit replies
    optimizer: OptimizerOptions = field(default_factory=OptimizerOptions)
    client_sizes: tuple[ClientSize, ...] = ()
    network: nn.Module | None = field(default=None, repr=False, compare=False)
    # the model a client is scored with: the one it deploys, or the one its latest local step
    # trained (``Client.scored_params``; the run's ``client_eval``)
    scored: Literal["deployed", "trained"] = "deployed"

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

    def node_data(self) -> PreparedNodeClient:
        """``data`` of a node-level client, for a method (or a branch) that runs at the node
        level only (its registered ``levels``)."""
        if not isinstance(self.data, PreparedNodeClient):
            raise GraphfedError(f"client {self.client_id}: node-level data expected")
        return self.data

    def graph_data(self) -> PreparedGraphClient:
        """``data`` of a graph-level client, for a method (or a branch) that runs at the graph
        level only."""
        if not isinstance(self.data, PreparedGraphClient):
            raise GraphfedError(f"client {self.client_id}: graph-level data expected")
        return self.data


class Server(ABC):
    """Server side. Its state is the attributes named in ``state_keys``: the default
    ``state_dict``/``load_state_dict`` checkpoint exactly those, so a subclass declares what it
    remembers (``state_keys = (*Base.state_keys, "extra")``) instead of writing the pair.

    ``options`` is ``setup.options``, an instance of the algorithm's registered options class:
    a subclass declares that class (``options: FedProxOptions``) to read its fields typed."""

    state_keys: ClassVar[tuple[str, ...]] = ()
    options: AlgorithmOptions

    def __init__(self, setup: Setup):
        self.setup = setup
        self.options = setup.options
        self._releases: list[Release] = []  # this round's noised releases, for the ledger

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
        """Fold the valid setup replies into the server state."""
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

    def record_release(self, release: Release) -> None:
        """Note a noised release of this round for the run's privacy ledger."""
        self._releases.append(release)

    def take_releases(self) -> list[Release]:
        """The releases noted since the last call (the round's), handed over once: the round's
        line of ``metrics.jsonl`` keeps them (``graphfed.privacy.ledger``)."""
        taken, self._releases = self._releases, []
        return taken

    def state_dict(self) -> dict[str, Any]:
        return {key: getattr(self, key) for key in self.state_keys}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        missing = [key for key in self.state_keys if key not in state]
        if missing:
            raise GraphfedError(f"checkpoint lacks server state {missing}")
        for key in self.state_keys:
            setattr(self, key, state[key])


class Client(ABC):
    """Client side. Stateless itself: whatever persists lives in ``ctx.state``. Its
    ``options`` are declared by a subclass as the server's are."""

    options: AlgorithmOptions

    def __init__(self, setup: Setup):
        self.setup = setup
        self.options = setup.options

    def answer_setup(self, message: Message, ctx: ClientContext) -> Message:
        """Answer the server's setup message (only called when the server has a setup phase)."""
        return Message()

    def local_train(self, params: Params, ctx: ClientContext, extra_loss: ExtraLoss | None = None,
                    batch_loss: BatchLoss | None = None, on_epoch: EpochHook | None = None
                    ) -> tuple[Params, TrainStats]:
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
        return self.step_done(message, ctx, params, stats)

    def step_done(self, message: Message, ctx: ClientContext, params: Params,
                  stats: TrainStats) -> Message:
        """``finish_step``, where every engine hands a trained step back: first kept as the
        model the client is scored with when the run scores trained models."""
        if self.setup.scored == "trained":
            ctx.state[TRAINED] = params
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

    def scored_params(self, message: Message, ctx: ClientContext) -> Params | None:
        """What this client is scored with: ``evaluated_params``, or, where the run scores
        trained models, the parameters its latest local step ended with (until it first
        trains, what it deploys)."""
        if self.setup.scored == "trained" and TRAINED in ctx.state:
            trained: Params = ctx.state[TRAINED]
            return trained
        return self.evaluated_params(message, ctx)

    def evaluate(self, message: Message, ctx: ClientContext) -> SplitMetrics:
        """Metrics per split of the model this client is scored with. A client that keeps this
        method lets an engine score its ``scored_params`` itself (``evaluates_params``)."""
        params = self.scored_params(message, ctx)
        if params is None:
            raise NotImplementedError(f"{type(self).__name__} names no evaluated parameters "
                                      "and does not override evaluate")
        return self.evaluate_params(params, ctx)

    def evaluate_params(self, params: Params, ctx: ClientContext) -> SplitMetrics:
        """``params`` on the client's val/test splits, and on the shared global test set as
        split ``global`` when the run hands one out."""
        metrics = ctx.trainer.evaluate(params, ctx.data)
        if ctx.global_test is not None:
            metrics["global"] = ctx.trainer.evaluate(params, ctx.global_test, ("test",))["test"]
        return metrics


def evaluates_params(client: Client) -> bool:
    """Whether ``client``'s evaluation is ``evaluate_params`` of its ``evaluated_params`` (it
    keeps ``Client.evaluate``), so that an engine may score those parameters its own way."""
    return type(client).evaluate is Client.evaluate
