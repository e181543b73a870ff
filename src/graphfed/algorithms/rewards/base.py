"""The gradient-reward protocol CGSV, DW, EU, RFFL and FGFL share.

Each agent keeps its own model, trains it, and uploads its (normalised) update. The server
aggregates the updates by the agents' values, re-values every agent, and sends each agent back the
aggregate sparsified to its value (``incentives.rewards``); the agent adds that reward to its
model. The methods differ only in how values are computed (``revalue``) and weigh the aggregate
(``aggregation_weights``), which subclasses override.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor

from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.mechanisms.sparse_rewards import (
    MaskMode,
    RewardShape,
    decode_sparse,
    encode_sparse,
    reward_counts,
    sparsify,
    value_weights,
    weighted_sum,
)
from graphfed.mechanisms.updates import (
    NormalizeMode,
    SharedScope,
    add_flat,
    cosines,
    delta,
    flatten,
    normalize,
    shared_names,
    unflatten,
)
from graphfed.messages import NUM_SAMPLES, TRAIN_LOSS, Message, ScalarSpec, TensorSpec, fit_scalars
from graphfed.protocol import AlgorithmOptions, ClientContext, Server, Setup
from graphfed.tensors import Params
from graphfed.training.trainer import BatchLoss


class RewardOptions(AlgorithmOptions):
    beta: float = Field(1.0, gt=0.0, description="reward sharpness in tanh(beta r) (Eq. 4)")
    reward_shape: RewardShape = Field(
        "tanh", description="reward size: tanh(beta r) / max tanh(beta r) (CGSV, FGFL), or "
        "r / max r (RFFL; beta then has no effect)")
    shared_params: SharedScope = Field(
        "all", description="exchanged parameters: all, or the message-passing layers only")
    normalize_update: NormalizeMode = Field(
        "unit", description="uploaded update: unit norm u / (|u| + 1e-7) (the CGSV, RFFL and "
        "FGFL codes; FGFL's training.py run_reput), clipped to clip_bound, or none: the raw "
        "update (FGFL's paper, Eqs. 9 and 13)")
    clip_bound: float = Field(1.0, gt=0.0, description="norm bound of normalize_update=clip")
    mask_mode: MaskMode = Field("all", description="top-k over the whole vector or per tensor")
    sparsify_reward: bool = Field(True, description="false: every agent gets the full aggregate")
    reward_apply: Literal["add_to_local", "reset_then_add", "discard"] = Field(
        "add_to_local", description="add_to_local: the reward is added to the agent's trained "
        "model (the RFFL/CGSV reference codes' convention); reset_then_add: to the model the "
        "round started from, so agents that all receive the full aggregate move together, "
        "the reading under which FGFL's beta = inf is vanilla FL (paper §3.1, Eq. 4); discard: "
        "sent but never applied, as in FGFL's code, whose W[k] = W[k] + reward (training.py) "
        "rebinds a dict entry and leaves the model's weights alone")
    own_step: Literal["raw", "normalized"] = Field(
        "raw", description="the agent keeps its raw local step, or its normalised update")
    global_model: Literal["accumulate", "mean_of_agents"] = Field(
        "accumulate", description="w_g <- w_g + u_N, or the mean of the agents' trained models "
        "(they then also upload their shared parameters)")


class RewardServer(Server):
    """Values, the value-weighted aggregate, per-agent sparse rewards and a global model that
    accumulates the full aggregate (w_g <- w_g + u_N)."""

    state_keys: ClassVar[tuple[str, ...]] = ("values", "params", "rewards", "data_sizes", "last")
    options: RewardOptions

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.names = shared_names(setup.initial_params, self.options.shared_params)
        self.tensor_sizes = [setup.initial_params[k].numel() for k in self.names]
        self.dim = sum(self.tensor_sizes)
        n = setup.num_clients
        self.values = torch.full((n,), 1.0 / n, dtype=torch.float64)
        self.params: Params = {k: v.clone() for k, v in setup.initial_params.items()}
        self.rewards: dict[int, tuple[Tensor, Tensor]] = {}
        self.data_sizes = torch.zeros(n, dtype=torch.float64)
        self.last: dict[str, Any] = {}

    # ------------------------------------------------------------ messages
    def message_for(self, client: int) -> Message:
        empty = (torch.empty(0, dtype=torch.int32), torch.empty(0))
        index, value = self.rewards.get(client, empty)
        return Message(tensors=encode_sparse(index, value, self.dim))

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        return {c: self.message_for(c) for c in clients}

    configure_evaluate = configure_fit

    def reply_spec(self, client: int) -> tuple[TensorSpec, ScalarSpec]:
        spec: TensorSpec = {"update": ((self.dim,), torch.float32)}
        if self.options.global_model == "mean_of_agents":
            spec["model"] = ((self.dim,), torch.float32)
        return spec, fit_scalars()

    # ------------------------------------------------------------ method hooks
    def aggregation_weights(self, clients: list[int]) -> Tensor:
        """Weights of this round's aggregate: ReLU of the previous values (Eq. 13)."""
        return value_weights(self.values[clients])

    def revalue(self, rnd: int, clients: list[int], updates: Tensor, aggregate: Tensor,
                alignment: Tensor) -> Tensor:
        """New values of every agent (length N) after this round."""
        raise NotImplementedError

    def after_aggregate(self, rnd: int, clients: list[int], updates: Tensor,
                        replies: dict[int, Message]) -> None:
        """Method-specific bookkeeping once values are updated (payoffs, prototypes, ...)."""

    # ------------------------------------------------------------ the round
    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        clients = sorted(replies)
        updates = torch.stack([replies[c].tensors["update"].double() for c in clients])
        for c in clients:
            self.data_sizes[c] = float(replies[c].scalars[NUM_SAMPLES])
        weights = self.aggregation_weights(clients)
        aggregate = weighted_sum(updates, weights)
        alignment = cosines(updates, aggregate)
        self.values = self.revalue(rnd, clients, updates, aggregate, alignment).double()
        values, o = self.values[clients], self.options
        counts = (reward_counts(values, self.dim, o.beta, o.reward_shape) if o.sparsify_reward
                  else torch.full((len(clients),), self.dim, dtype=torch.long))
        aggregate32 = aggregate.float()
        self.rewards = {c: sparsify(aggregate32, int(n), o.mask_mode,
                                    self.tensor_sizes) for c, n in zip(clients, counts.tolist(),
                                                                       strict=True)}
        if o.global_model == "accumulate":
            self.params = add_flat(self.params, aggregate32, self.names)
        else:
            mean = torch.stack([replies[c].tensors["model"] for c in clients]).mean(0)
            self.params = {**self.params, **unflatten(mean, self.params, self.names)}
        self.last = {"clients": clients, "weights": weights.tolist(),
                     "alignment": alignment.tolist(), "values": self.values.tolist(),
                     "reward_components": counts.tolist(), "shared_dim": self.dim,
                     "reward_bytes": sum(Message(encode_sparse(*r, self.dim)).nbytes
                                         for r in self.rewards.values()),
                     "reward_bytes_dense": 4 * self.dim * len(clients)}
        self.after_aggregate(rnd, clients, updates, replies)

    def global_params(self) -> Params | None:
        return self.params

    def round_metrics(self) -> dict[str, Any]:
        return self.last


class RewardClient(PersonalClient):
    """Adds the received reward to its model, trains, uploads the normalised update."""

    options: RewardOptions

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.names = shared_names(setup.initial_params, self.options.shared_params)
        self.dim = sum(setup.initial_params[k].numel() for k in self.names)

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        reward = decode_sparse(message.tensors, self.dim)
        if reward is None or self.options.reward_apply == "discard":
            return params
        return add_flat(params, reward.to(params[self.names[0]].dtype), self.names)

    def batch_loss(self, message: Message, ctx: ClientContext) -> BatchLoss | None:
        """An embedding regulariser for local training (FGFL's prototypes); none by default."""
        return None

    def upload(self, message: Message, ctx: ClientContext, trained: Params, update: Tensor
               ) -> Message:
        """The reply; subclasses add their own tensors (FGFL: prototypes)."""
        tensors = {"update": update.float()}
        if self.options.global_model == "mean_of_agents":
            tensors["model"] = flatten(trained, self.names).float()
        return self.reply(tensors, ctx)

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        start = self.current(message, ctx)
        trained, stats = self.local_train(start, ctx, batch_loss=self.batch_loss(message, ctx))
        update = normalize(delta(trained, start, self.names), self.options.normalize_update,
                           self.options.clip_bound)
        if self.options.reward_apply == "reset_then_add":
            ctx.state["params"] = start
        elif self.options.own_step == "normalized":
            ctx.state["params"] = add_flat(start, update.to(start[self.names[0]].dtype),
                                           self.names)
        else:
            ctx.state["params"] = trained
        reply = self.upload(message, ctx, trained, update)
        reply.scalars[TRAIN_LOSS] = stats.loss
        return reply
