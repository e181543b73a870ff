"""SCAFFOLD (Karimireddy, Kale, Mohri, Reddi, Stich, Suresh, "SCAFFOLD: Stochastic controlled
averaging for federated learning", ICML 2020): Alg. 1 with option II of Eq. 4.

The server sends the model x and its control c. A client adds c - c_i (c_i, its own control, kept
in its state across rounds) to every local gradient, takes K steps of rate eta_l from x to y_i,
counts them, and re-estimates its control: c_i+ = c_i - c + (x - y_i) / (K eta_l). It answers
with y_i (the server knows x, so this is Delta y_i = y_i - x in the same bytes) and
Delta c_i = c_i+ - c_i: a model and a control each way, twice FedAvg's bytes. The server combines
the y_i through the run's aggregation rule (``FedAvgServer.average``) and moves
x <- x + eta_g (mean - x), which is Alg. 1's x + eta_g mean(Delta y_i); it combines the Delta c_i
by the same rule and moves c <- c + (|S|/N) mean(Delta c_i). Neither side trusts a number the
other sends beyond the checked tensors: the weights are the partition's training sizes.

Weights. Alg. 1 weighs clients alike. Here the models are weighted as FedAvg weighs them (train
sizes; ``weighted=false``: uniform, Alg. 1 exactly) and the controls by the same weights, so that
under full participation c stays the weighted mean of the c_i: the corrections c - c_i then
cancel under the weights that define the objective the averaged model descends.

Optimizer. Alg. 1's local step is SGD. ``local_optimizer=sgd`` (the default) trains with plain
SGD at ``optimizer.lr`` (keeping ``optimizer.weight_decay`` and ``momentum``) whatever
``optimizer.name`` says; ``run`` keeps the run's optimizer. With Adam the correction is still
added to the gradient, which Adam then rescales, and eta_l in the control update is the nominal
``optimizer.lr``.

``compat_gpfl_code`` runs SCAFFOLD as the GPFL authors' code does for its Table 2 baseline
(Jiachen2cc/Graph-Personalized-Federated-Learning; ``run_scaffold``, training.py:241-264, and
``Server.scaffold_update``, server.py:290-305), which makes it a personalised method:

* every client copies the server model once, before round 1 (training.py:243-244), and never
  again: each trains its own model from round to round, and the model it is evaluated on is its
  own (training.py:257);
* local training is the run's optimizer with no correction in the gradient (their Adam,
  created once per client and so persistent across rounds, setupGC.py:45-46; lr 1e-3 with weight
  decay 5e-4, main.py:96-99): here ``local_optimizer`` defaults to ``run``, and the GPFL
  protocol sets ``optimizer.persistent=true``;
* after each local epoch the weights move once by W <- W - lr (c - c_i) (training.py:252-256),
  lr being the optimizer's;
* the control delta divides by E lr, E the local epochs, not the steps (server.py:296); the
  client's control adds it (server.py:297);
* the server moves x by the mean of y_i - x and c by the mean of the control deltas, both
  unweighted over all clients (server.py:300-305; ``weighted=false`` matches, and their partition
  gives every client the same size). x reaches the clients only inside the control update, so
  the server has no deployed model (``global_params`` is None).

Controls start at zero on both sides, as in Alg. 1 and in that code (client.py:37, server.py:22).
"""

from __future__ import annotations

import torch
from pydantic import Field, model_validator

from graphfed.algorithms.averaging.fedavg import FedAvgClient, FedAvgOptions, FedAvgServer
from graphfed.algorithms.averaging.local_sgd import LocalOptimizer, local_optimizer
from graphfed.algorithms.registry import ANY_LEVEL, ANY_TASK, Algorithm, register
from graphfed.mechanisms.aggregation import global_step
from graphfed.mechanisms.control_variates import add, control_delta, correction
from graphfed.mechanisms.updates import under_prefix, with_prefix
from graphfed.messages import Message, ScalarSpec, TensorSpec, fit_scalars, spec_of
from graphfed.protocol import ClientContext, Setup
from graphfed.tensors import Params
from graphfed.training import TrainStats
from graphfed.training.step import LocalStep

CONTROL = "control."  # message prefix of the control tensors (c down, Delta c_i up)
CLIENT_CONTROL = "scaffold_control"  # the client's c_i in its state
OWN_MODEL = "params"  # compat_gpfl_code: the client's own model in its state


class ScaffoldOptions(FedAvgOptions):
    global_lr: float = Field(1.0, gt=0.0, description="server learning rate eta_g: "
                             "x <- x + eta_g (mean of the y_i - x) (Alg. 1 line 16)")
    local_optimizer: LocalOptimizer | None = Field(
        None, description="sgd: plain SGD at optimizer.lr, Alg. 1's local step, whatever "
        "optimizer.name says; run: the run's optimizer (the correction is added to the "
        "gradient it sees). Unset: sgd, or run with compat_gpfl_code")
    compat_gpfl_code: bool = Field(
        False, description="SCAFFOLD as the GPFL authors' code runs it: clients keep and train "
        "their own models (never the server's), the correction W <- W - lr (c - c_i) is applied "
        "once per epoch, the control delta divides by the epochs (see the module docstring)")

    @model_validator(mode="after")
    def _resolve_local_optimizer(self) -> ScaffoldOptions:
        if self.local_optimizer is None:
            self.local_optimizer = "run" if self.compat_gpfl_code else "sgd"
        return self


def split(tensors: Params) -> tuple[Params, Params]:
    """A SCAFFOLD message's model (x, or y_i) and controls (c, or Delta c_i)."""
    model = {k: v for k, v in tensors.items() if not k.startswith(CONTROL)}
    return model, under_prefix(tensors, CONTROL)


class ScaffoldServer(FedAvgServer):
    """Holds x and c; averages the returned models and control deltas by the run's rule."""

    state_keys = (*FedAvgServer.state_keys, "control")
    options: ScaffoldOptions

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.control: Params = {k: torch.zeros_like(v) for k, v in self.params.items()}

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        message = Message({**self.params, **with_prefix(self.control, CONTROL)})
        return {c: message for c in clients}

    def configure_evaluate(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        """x to evaluate; nothing with ``compat_gpfl_code``, where a client deploys its own."""
        message = Message() if self.options.compat_gpfl_code else Message(self.params)
        return {c: message for c in clients}

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        return ({**spec_of(self.params), **spec_of(with_prefix(self.control, CONTROL))},
                fit_scalars())

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        if not replies:
            return
        weights = self.weights(replies)
        models, deltas = zip(*(split(m.tensors) for m in replies.values()), strict=True)
        mean = self.average(list(models), weights, self.params)
        self.params = global_step(self.params, mean, self.options.global_lr)
        mean_delta = self.average(list(deltas), weights, None)  # norm_clip: the deltas' norms
        self.control = add(self.control, mean_delta, len(replies) / self.setup.num_clients)

    def global_params(self) -> Params | None:
        return None if self.options.compat_gpfl_code else self.params


class ScaffoldClient(FedAvgClient):
    """Keeps c_i (and, with ``compat_gpfl_code``, its own model) in its state."""

    options: ScaffoldOptions

    def own_control(self, ctx: ClientContext, like: Params) -> Params:
        if CLIENT_CONTROL in ctx.state:
            return ctx.state[CLIENT_CONTROL]
        return {k: torch.zeros_like(v) for k, v in like.items()}

    def own_model(self, ctx: ClientContext) -> Params:
        return ctx.state.get(OWN_MODEL, self.setup.initial_params)

    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep | None:
        """Local epochs from x with c - c_i added to every gradient (Alg. 1 line 10)."""
        if self.options.compat_gpfl_code:
            return None
        x, c = split(message.tensors)
        return LocalStep(x, gradient_offset=correction(c, self.own_control(ctx, c)))

    def finish_step(self, message: Message, ctx: ClientContext, params: Params,
                    stats: TrainStats) -> Message:
        x, c = split(message.tensors)
        return self.answer(ctx, x, c, params, stats, stats.steps)

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        if not self.options.compat_gpfl_code:
            return self.fit_by_step(message, ctx)
        x, c = split(message.tensors)
        lr = ctx.trainer.optimizer.lr
        shift = {k: lr * v for k, v in correction(c, self.own_control(ctx, c)).items()}

        def once_per_epoch(live: Params) -> None:
            for k, v in shift.items():
                live[k].sub_(v)

        trained, stats = self.local_train(self.own_model(ctx), ctx, on_epoch=once_per_epoch)
        ctx.state[OWN_MODEL] = trained
        return self.answer(ctx, x, c, trained, stats, self.setup.local_epochs)

    def answer(self, ctx: ClientContext, x: Params, c: Params, trained: Params,
               stats: TrainStats, steps: int) -> Message:
        """Option II's control update (c_i += Delta c_i) and the reply: y_i and Delta c_i."""
        delta = control_delta(x, trained, c, steps, ctx.trainer.optimizer.lr)
        ctx.state[CLIENT_CONTROL] = add(self.own_control(ctx, c), delta)
        return self.reply({**trained, **with_prefix(delta, CONTROL)}, ctx, stats)

    def evaluated_params(self, message: Message, ctx: ClientContext) -> Params | None:
        if self.options.compat_gpfl_code:
            return self.own_model(ctx)
        return super().evaluated_params(message, ctx)


SCAFFOLD = register(Algorithm(
    "scaffold", ScaffoldServer, ScaffoldClient, ScaffoldOptions,
    family="averaging",
    levels=ANY_LEVEL,
    tasks=ANY_TASK,
    paper="Karimireddy et al., ICML 2020 (SCAFFOLD)",
    batched=True,
    optimizer=local_optimizer,
    sparse_features=True,
    modes={"compat": ("scaffold.compat_gpfl_code=true", "optimizer.persistent=true")},
    description="FedAvg with control variates against client drift (option II); "
                "compat_gpfl_code: the GPFL code's personalised variant"))
