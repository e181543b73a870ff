"""q-FedAvg (Li, Sanjabi, Beirami, Smith, "Fair resource allocation in federated learning",
ICLR 2020, Alg. 2): FedAvg's local epochs, but the server minimises sum_k F_k^(q+1) / (q+1),
so a client whose loss F_k is high pulls the global model harder; q = 0 is FedAvg. FairGFL
(Zhou et al., TPDS 2025) runs it as a fairness baseline (spec ``fairgfl.md`` §4, §7.5 F12).

Round: the server sends w. Client k measures F_k, the mean cross-entropy of w on its training
data in eval mode (the reference code's ``c.get_loss()`` before ``solve_inner``,
``litian96/fair_flearn:flearn/trainers/qffedavg.py``), trains as FedAvg does and answers with
its model w_k and F_k (one scalar more than FedAvg). The server applies
w <- w - sum_k F_k^q Delta_k / sum_k h_k, Delta_k = L (w - w_k),
h_k = q F_k^(q-1) ||Delta_k||^2 + L F_k^q, F_k + 1e-10 in both, L = 1/``optimizer.lr`` unless
``lipschitz`` is set; ``mechanisms.qffl`` computes it as the run's aggregation rule over the
w_k weighted by F_k^q, then a step s in (0, 1] towards it.

Weights. Alg. 2 samples clients with probability p_k (their data share) and sums the sampled
ones unweighted; the reference code's q-FedAvg sets p_k uniform. ``weighted=false`` (default)
is that sum; ``weighted=true`` scales each Delta_k and h_k by the client's training size, the
estimate of p_k = n_k / n under graphfed's uniform sampling.

Optimizer. Alg. 2's local step is SGD, and L = 1/lr makes L (w - w_k) the summed gradients
of the local steps. ``local_optimizer=sgd`` (the default, as SCAFFOLD's) trains so whatever
``optimizer.name`` says; ``run`` keeps the run's optimizer. With Adam every step moves every
weight by about lr, ||w - w_k||^2 is then about (steps x lr)^2 x #weights, and s collapses. On
Cora (5 METIS clients, 30 rounds, q = 1): the default Adam at lr 0.01 gave s = 0.0021 and the
initial model's test accuracy, 0.17; SGD at lr 0.01 gave s = 0.996 but learns slowly (0.32);
SGD at lr 0.5 gave 0.74 (FedAvg, uniform, same SGD: 0.78).

Trust. F_k is the client's claim: the server has no data to check it, and q-FFL needs it. Its
reply spec declares F_k a loss (``messages.LOSS``: finite, non-negative, at most float32's
largest value, which no loss a client computed exceeds), so the boundary drops a reply claiming
anything else; the server adds the reference's 1e-10. Within that range a client can lie: an
F_k far above the others' gives it almost all the weight of the mean (its own model replaces
the global one as s nears 1 when F_k grows), and F_k = 0 removes its update. Under the
mean rule the new model stays in the convex hull of w and the returned models (s <= 1);
``aggregation.rule`` median, trimmed_mean or krum ignore the weights, which leaves a liar only
the step s.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from graphfed.algorithms.averaging.fedavg import FedAvgClient, FedAvgOptions, FedAvgServer
from graphfed.algorithms.averaging.local_sgd import LocalOptimizer, local_optimizer
from graphfed.algorithms.registry import ANY_LEVEL, ANY_TASK, Algorithm, register
from graphfed.mechanisms.aggregation import global_step
from graphfed.mechanisms.qffl import qffl_weights_and_step, squared_distance
from graphfed.messages import LOSS, Message, ScalarSpec, TensorSpec
from graphfed.protocol import ClientContext, Setup
from graphfed.seeding import preserved_rngs
from graphfed.tensors import Params
from graphfed.training import TrainStats

RECEIVED_LOSS = "qfedavg_loss"  # F_k: the received model's mean training loss at client k


class QFedAvgOptions(FedAvgOptions):
    q: float = Field(1.0, ge=0.0, description="fairness exponent: the server minimises "
                     "sum F_k^(q+1)/(q+1); 0 is FedAvg. RECONSTRUCTED: FairGFL's value was "
                     "lost (spec fairgfl.md §7.5 F12); 1, its suggested sweep is {0.1, 1, 5}")
    lipschitz: float | None = Field(
        None, gt=0.0, description="L in Delta_k = L (w - w_k); unset: 1 / optimizer.lr, as "
        "the reference code sets it")
    local_optimizer: LocalOptimizer = Field(
        "sgd", description="sgd: plain SGD at optimizer.lr, Alg. 2's local step, under which "
        "L = 1/lr estimates the Lipschitz constant; run: the run's optimizer (with Adam each "
        "step moves every weight by about lr, so L (w - w_k) overstates the gradient and the "
        "server's step nearly vanishes)")
    weighted: bool = Field(False, description="scale each client's Delta_k and h_k by its "
                           "training size (p_k); false: Alg. 2's unweighted sum over the "
                           "sampled clients, as the reference code runs it")


def lipschitz_constant(options: QFedAvgOptions, lr: float) -> float:
    """L: the option, or 1 / the clients' learning rate ``lr``."""
    return options.lipschitz if options.lipschitz is not None else 1.0 / lr


class QFedAvgServer(FedAvgServer):
    """FedAvg's server with q-FFL's loss-weighted mean and step."""

    state_keys = (*FedAvgServer.state_keys, "last")
    options: QFedAvgOptions

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.lipschitz = lipschitz_constant(self.options, setup.optimizer.lr)
        self.last: dict[str, list[float] | float] = {}

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        spec, scalars = super().reply_spec(client)
        return spec, {**scalars, RECEIVED_LOSS: LOSS}

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        if not replies:
            return
        options = self.options
        models = [m.tensors for m in replies.values()]
        losses = [float(m.scalars[RECEIVED_LOSS]) for m in replies.values()]
        weights, step = qffl_weights_and_step(
            losses, [squared_distance(self.params, m) for m in models], self.weights(replies),
            options.q, self.lipschitz)
        self.params = global_step(self.params, self.average(models, weights, self.params), step)
        self.last = {"qfedavg_losses": losses, "qfedavg_weights": weights,
                     "qfedavg_step": step}

    def round_metrics(self) -> dict[str, Any]:
        return self.last


def received_loss(params: Params, ctx: ClientContext) -> float:
    """F_k: the mean training loss of ``params`` in eval mode. Run on forked random streams, so
    a sampled evaluation draws nothing that training would have drawn."""
    with preserved_rngs():
        return float(ctx.trainer.evaluate(params, ctx.data, ("train",))["train"]["loss"])


class QFedAvgClient(FedAvgClient):
    """FedAvg's client; its reply adds F_k of the model it was sent. Measured after training
    on the received parameters, which training leaves as they were (graphfed's models hold no
    buffers training could move), so it is the loss before training, and the step stays a
    standard one the batched engine may train."""

    def finish_step(self, message: Message, ctx: ClientContext, params: Params,
                    stats: TrainStats) -> Message:
        reply = super().finish_step(message, ctx, params, stats)
        reply.scalars[RECEIVED_LOSS] = received_loss(message.tensors, ctx)
        return reply


QFEDAVG = register(Algorithm(
    "qfedavg", QFedAvgServer, QFedAvgClient, QFedAvgOptions,
    family="averaging",
    levels=ANY_LEVEL,
    tasks=ANY_TASK,
    paper="Li et al., ICLR 2020 (q-FFL / q-FedAvg)",
    batched=True,
    optimizer=local_optimizer,
    description="FedAvg whose server weighs clients by their loss^q (fair resource "
                "allocation)"))
