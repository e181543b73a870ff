"""FedAvg (McMahan et al., AISTATS 2017): local epochs from the global model, then a
sample-size weighted average of the returned parameters."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from graphfed.algorithms.averaging.leave_one_out import (
    RECORD,
    ContributionProbe,
    GlobalTest,
    LeaveOneOutOptions,
    server_inputs,
)
from graphfed.algorithms.registry import ANY_LEVEL, ANY_TASK, Algorithm, register
from graphfed.errors import GraphfedError
from graphfed.mechanisms.robust import robust_average
from graphfed.messages import NUM_SAMPLES, Message, ScalarSpec, TensorSpec, fit_scalars, spec_of
from graphfed.privacy.dp_fedavg import DPAggregator
from graphfed.protocol import AlgorithmOptions, Client, ClientContext, Server, Setup
from graphfed.tensors import Params
from graphfed.training import TrainStats
from graphfed.training.step import LocalStep


class FedAvgOptions(AlgorithmOptions):
    weighted: bool = Field(True, description="weight by client sample counts (False: uniform)")


class FedAvgOwnOptions(LeaveOneOutOptions, FedAvgOptions):
    """FedAvg's own options: the family's, and the leave-one-out diagnostic (the family's
    servers that combine replies their own way do not take it)."""


class FedAvgServer(Server):
    """Holds one global model; every sampled client gets it, replies are averaged."""

    state_keys: ClassVar[tuple[str, ...]] = ("params",)
    options: FedAvgOptions

    def __init__(self, setup: Setup, global_test: GlobalTest | None = None):
        super().__init__(setup)
        self.params: Params = {k: v.clone() for k, v in setup.initial_params.items()}
        dp = setup.dp
        self.dp = (None if dp is None else
                   DPAggregator(dp.options, dp.clients_per_round, setup.num_clients))
        self.probe = ContributionProbe.of(setup, global_test)
        self.contribution: dict[str, Any] = {}

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        message = Message(tensors=self.params)
        return {c: message for c in clients}

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        return spec_of(self.params), fit_scalars()

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        if not replies:
            return
        models, weights = [m.tensors for m in replies.values()], self.weights(replies)
        if self.probe is not None:
            index = {c: j for j, c in enumerate(replies)}
            without = self.probe.leave_out(list(replies), lambda rest: self.average(
                [models[index[c]] for c in rest], [weights[index[c]] for c in rest],
                self.params))
        self.params = self.average(models, weights, self.params)
        if self.probe is not None:
            self.contribution = self.probe.record(list(replies), without, self.params)

    def round_metrics(self) -> dict[str, Any]:
        return {RECORD: self.contribution} if self.probe is not None else {}

    def weights(self, replies: dict[int, Message]) -> list[float]:
        """Each reply's aggregation weight: its training samples (the partition's count, which
        the runtime puts in place of the client's claim), or 1 with ``weighted=false``."""
        weighted = self.options.weighted
        return [float(m.scalars[NUM_SAMPLES]) if weighted else 1.0 for m in replies.values()]

    def secure_weights(self, clients: list[int]) -> dict[int, int]:
        """Each client's weight under secure aggregation, which the client applies itself
        before masking: what ``weights`` gives its reply, and 1 under ``dp`` (DP-FedAvg's mean
        is uniform)."""
        sizes = self.setup.client_sizes
        weighted = self.options.weighted and self.dp is None
        return {c: sizes[c].train if weighted else 1 for c in clients}

    def aggregate_mean(self, rnd: int, mean: Params, contributors: list[int]) -> None:
        """Secure aggregation's result in place of the replies: the weighted mean of the
        clients' updates, all the server learns of them (``runtime.secagg``). Under ``dp``
        (``where=client``, the only kind it allows) the clients noised their updates: the
        round is the same release for the ledger."""
        if self.dp is not None:
            self.record_release(self.dp.release)
        self.params = {k: (v.double() + mean[k]).to(v.dtype) for k, v in self.params.items()}

    def average(self, models: list[Params], weights: list[float],
                current: Params | None) -> Params:
        """The one place an averaging server combines models: the run's aggregation rule
        (``aggregation.rule``; the weighted mean by default) over ``models``, ``current`` being
        the model they were trained from (what ``norm_clip`` measures updates against). Under
        ``dp`` it is DP-FedAvg's uniform clipped and noised mean, a release for the ledger."""
        if self.dp is not None:
            self.record_release(self.dp.release)
            return self.dp.average(models, current)
        return robust_average(models, weights, self.setup.aggregation, current)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.dp is not None:  # the adaptive clip
            state["dp"] = self.dp.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.dp is not None:
            if "dp" not in state:
                raise GraphfedError("checkpoint lacks server state ['dp']")
            self.dp.load_state_dict(state["dp"])

    configure_evaluate = configure_fit

    def global_params(self) -> Params | None:
        return self.params


class FedAvgClient(Client):
    """Trains the received model on local data: a standard ``LocalStep`` (subclasses add a
    proximal term there), so the batched engine may train many clients at once."""

    def local_step(self, message: Message, ctx: ClientContext) -> LocalStep | None:
        return LocalStep(message.tensors)

    def finish_step(self, message: Message, ctx: ClientContext, params: Params,
                    stats: TrainStats) -> Message:
        return self.reply(params, ctx, stats)

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        return self.fit_by_step(message, ctx)

    def evaluated_params(self, message: Message, ctx: ClientContext) -> Params | None:
        return message.tensors


FEDAVG = register(Algorithm(
    "fedavg", FedAvgServer, FedAvgClient, FedAvgOwnOptions,
    family="averaging",
    levels=ANY_LEVEL,
    tasks=ANY_TASK,
    paper="McMahan et al., AISTATS 2017 (FedAvg)",
    batched=True,
    sparse_features=True,
    server_inputs=server_inputs,
    description="sample-size weighted parameter averaging"))
