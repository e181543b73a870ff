"""FedSage+'s client: NeighGen trained on its impaired graph while asked to, then the classifier
trained and evaluated on its graph mended by the final generator."""

from __future__ import annotations

from dataclasses import replace

from torch import Tensor

from graphfed.algorithms.averaging.fedavg import FedAvgClient
from graphfed.algorithms.averaging.fedsage_plus.generator import mend_with, train_neighgen
from graphfed.algorithms.averaging.fedsage_plus.impair import Impaired, hide_nodes
from graphfed.algorithms.averaging.fedsage_plus.messages import (
    GEN,
    GEN_LOSS,
    MENDED,
    TRAIN_GEN,
    split_message,
)
from graphfed.algorithms.averaging.fedsage_plus.options import FedSagePlusOptions
from graphfed.data.federated import NodeClient
from graphfed.mechanisms.updates import with_prefix
from graphfed.messages import NUM_SAMPLES, TRAIN_LOSS, Message, Scalar
from graphfed.protocol import ClientContext
from graphfed.tensors import Params
from graphfed.training.batches import PreparedNodeClient
from graphfed.training.trainer import SplitMetrics

IMPAIRED = "fedsage+_impaired"  # state: the hiding is a random draw, kept for good
MENDED_GRAPH = "fedsage+_mended_graph"  # state: the graph the final generator mended
MENDED_DATA = "fedsage+_mended_data"  # cache: the mended graph prepared on the device


class FedSagePlusClient(FedAvgClient):
    """Trains NeighGen on its impaired graph while asked to; then mends its graph with the final
    generator and trains / evaluates the classifier on the mended graph."""

    options: FedSagePlusOptions

    def _impaired(self, ctx: ClientContext) -> Impaired:
        """The client's impaired graph; hiding is a random draw, so it is state, kept as plain
        tensors (a checkpoint holds data only, and a resume puts them on the device)."""
        if IMPAIRED not in ctx.state:
            o = self.options
            ctx.state[IMPAIRED] = vars(hide_nodes(ctx.node_data().graph, o.hide_portion, o.num_pred)
                                       .to(ctx.node_data().x.device))
        return Impaired(**ctx.state[IMPAIRED])

    def _gen_reply(self, params: Params | None, ctx: ClientContext
                   ) -> tuple[dict[str, Tensor], dict[str, Scalar]]:
        data = self._impaired(ctx)
        trained, loss = train_neighgen(params, data, self.setup.num_classes, self.options)
        return with_prefix(trained, GEN), {GEN_LOSS: loss}

    def answer_setup(self, message: Message, ctx: ClientContext) -> Message:
        tensors, scalars = self._gen_reply(None, ctx)
        return Message(tensors=tensors, scalars=scalars)

    def _view(self, ctx: ClientContext) -> ClientContext:
        """``ctx`` with the client's data showing the mended graph, once there is one. The
        mended graph is state (the generator that made it is gone); its prepared form on the
        client's device is cache, rebuilt from it where needed (a new process, a resume)."""
        if MENDED_GRAPH not in ctx.state:
            return ctx
        if MENDED_DATA not in ctx.cache:
            data = ctx.node_data()
            client = NodeClient(graph=ctx.state[MENDED_GRAPH], global_ids=data.global_ids)
            ctx.cache[MENDED_DATA] = PreparedNodeClient(client, ctx.trainer.model, data.x.device,
                                                        data.sampling)
        return replace(ctx, data=ctx.cache[MENDED_DATA])

    def _mend(self, gen: Params, ctx: ClientContext) -> None:
        graph = mend_with(gen, ctx.node_data().graph, self.setup.num_classes, self.options)
        ctx.state[MENDED_GRAPH] = graph
        ctx.cache.pop(MENDED_DATA, None)
        ctx.state["fedsage+_generated_nodes"] = graph.num_nodes - ctx.node_data().graph.num_nodes

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        classifier, gen = split_message(message)
        tensors: dict[str, Tensor] = {}
        scalars: dict[str, Scalar] = {}
        train_gen = bool(message.scalars.get(TRAIN_GEN, False)) and bool(gen)
        if train_gen:
            tensors, scalars = self._gen_reply(gen, ctx)
        elif gen:
            self._mend(gen, ctx)
        view = self._view(ctx)
        out = {NUM_SAMPLES: view.data.num_samples("train"), MENDED: MENDED_GRAPH in ctx.state,
               **scalars}
        if train_gen and not self.options.classifier_during_gen:
            params = {k: v.clone() for k, v in classifier.items()}  # untouched this round
        else:
            params, stats = self.local_train(classifier, view)
            out[TRAIN_LOSS] = stats.loss
        return Message(tensors={**params, **tensors}, scalars=out)

    def evaluate(self, message: Message, ctx: ClientContext) -> SplitMetrics:
        classifier, _ = split_message(message)
        return self.evaluate_params(classifier, self._view(ctx))
