"""FedEgo's client (spec §3.2): take Θ_g, mix in Φ_g by λ_i, train on ego-trees, upload Θ_i and
one mashed ego-graph per training batch (P_i never leaves)."""

from __future__ import annotations

from graphfed.algorithms.fedego.ego_view import (
    TrainingBatchMasher,
    ego_view,
    label_distribution,
    mashed_ego_graphs,
)
from graphfed.algorithms.fedego.options import (
    REDUCTION,
    join_params,
    mixing_weight,
    split_params,
)
from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.mechanisms.updates import with_prefix
from graphfed.messages import Message
from graphfed.protocol import ClientContext
from graphfed.tensors import Params


class FedEgoClient(PersonalClient):
    """Keeps its full model; takes Θ_g and mixes in Φ_g by its own λ_i (P_i never leaves)."""

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        theta, phi = split_params(params)
        sent_theta, sent_phi = split_params(message.tensors)
        if self.options.average_reduction and sent_theta:
            theta = sent_theta
        if message.scalars.get("mix"):
            y = ctx.data.y
            if self.options.label_distribution_from == "train":
                y = y[ctx.data.index["train"]]
            own = label_distribution(y, self.setup.num_classes)
            lam = mixing_weight(own, message.tensors["label_distribution"], self.options)
            phi = {k: lam * sent_phi[k] + (1 - lam) * v for k, v in phi.items()}
        return join_params(theta, phi)

    def fit(self, message, ctx):
        view = ego_view(ctx.data, self.options, ctx.cache)
        model, classes = ctx.trainer.model, self.setup.num_classes
        masher = (TrainingBatchMasher(view, model, classes, self.options)
                  if self.options.mash_from == "training_batches" else None)
        params, stats = ctx.trainer.train(self.current(message, ctx), view,
                                          self.setup.local_epochs, self.setup.batch_size,
                                          memory=ctx.state, on_batch=masher)
        ctx.state["params"] = params
        theta, _ = split_params(params)
        x, y = masher.result() if masher else mashed_ego_graphs(
            view, model, theta, classes, self.setup.batch_size or 32, self.options)
        tensors = with_prefix(theta, REDUCTION)
        tensors.update(mashed_x=x, mashed_y=y)
        return self.reply(tensors, ctx, stats)

    def evaluate(self, message, ctx):
        params = self.current(message, ctx)
        metrics = ctx.trainer.evaluate(params, ego_view(ctx.data, self.options, ctx.cache))
        if ctx.global_test is not None:
            metrics["global"] = ctx.trainer.evaluate(
                params, ego_view(ctx.global_test, self.options, ctx.cache, "global_view"),
                ("test",))["test"]
        return metrics
