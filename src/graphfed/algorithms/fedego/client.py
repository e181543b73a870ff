"""FedEgo's client (spec §3.2): take Θ_g, mix in Φ_g by λ_i, train on ego-trees, upload Θ_i and
one mashed ego-graph per training batch (P_i never leaves)."""

from __future__ import annotations

from typing import cast

from graphfed.algorithms.fedego.ego_view import (
    TrainingBatchMasher,
    as_prepared,
    ego_view,
    label_distribution,
    mashed_ego_graphs,
)
from graphfed.algorithms.fedego.options import (
    REDUCTION,
    FedEgoOptions,
    join_params,
    mixing_weight,
    split_params,
)
from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.mechanisms.updates import with_prefix
from graphfed.messages import Message
from graphfed.models.ego import FedEgoNet
from graphfed.protocol import ClientContext
from graphfed.tensors import Params
from graphfed.training.batches import PreparedNodeClient
from graphfed.training.trainer import SplitMetrics


class FedEgoClient(PersonalClient):
    """Keeps its full model; takes Θ_g and mixes in Φ_g by its own λ_i (P_i never leaves)."""

    options: FedEgoOptions

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        theta, phi = split_params(params)
        sent_theta, sent_phi = split_params(message.tensors)
        if self.options.average_reduction and sent_theta:
            theta = sent_theta
        if message.scalars.get("mix"):
            y = ctx.node_data().y
            if self.options.label_distribution_from == "train":
                y = y[ctx.node_data().index["train"]]
            own = label_distribution(y, self.setup.num_classes)
            lam = mixing_weight(own, message.tensors["label_distribution"], self.options)
            phi = {k: lam * sent_phi[k] + (1 - lam) * v for k, v in phi.items()}
        return join_params(theta, phi)

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        view = ego_view(ctx.node_data(), self.options, ctx.cache)
        model = cast(FedEgoNet, ctx.trainer.model)  # the network FedEgo registers
        classes = self.setup.num_classes
        masher = (TrainingBatchMasher(view, model, classes, self.options)
                  if self.options.mash_from == "training_batches" else None)
        params, stats = ctx.trainer.train(self.current(message, ctx), as_prepared(view),
                                          self.setup.local_epochs, self.setup.batch_size,
                                          memory=ctx.state, on_batch=masher)
        ctx.state["params"] = params
        theta, _ = split_params(params)
        x, y = masher.result() if masher else mashed_ego_graphs(
            view, model, theta, classes, self.setup.batch_size or 32, self.options)
        tensors = with_prefix(theta, REDUCTION)
        tensors.update(mashed_x=x, mashed_y=y)
        return self.reply(tensors, ctx, stats)

    def evaluate(self, message: Message, ctx: ClientContext) -> SplitMetrics:
        params = self.current(message, ctx)
        view = ego_view(ctx.node_data(), self.options, ctx.cache)
        metrics = ctx.trainer.evaluate(params, as_prepared(view))
        if isinstance(ctx.global_test, PreparedNodeClient):  # FedEgo runs at the node level
            shared = ego_view(ctx.global_test, self.options, ctx.cache, "global_view")
            metrics["global"] = ctx.trainer.evaluate(params, as_prepared(shared),
                                                     ("test",))["test"]
        return metrics
