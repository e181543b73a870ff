"""GPFL's client: its property vector once before round 1; each round local epochs from the
personalised model the server sent, then the update Δθ_i = θ̂_i − θ_i and the functional
embedding of θ̂_i (spec §3.3, §3.5 step 1; §7.4 option (a): computed here and uploaded, so the
server needs no model)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from graphfed.algorithms.gpfl.options import EMBEDDING, PROPERTY_VECTOR, UPDATE, GPFLOptions
from graphfed.algorithms.gpfl.random_graphs import random_graph_batch
from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.data.properties import graph_properties
from graphfed.mechanisms.updates import with_prefix
from graphfed.messages import Message
from graphfed.protocol import ClientContext
from graphfed.tensors import Params
from graphfed.training.batches import GraphBatch, collate_graphs


class GPFLClient(PersonalClient):
    """Its model lives on the server between rounds: every message carries it."""

    options: GPFLOptions

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        return {k: message.tensors[k].to(v.dtype) for k, v in params.items()}

    def answer_setup(self, message: Message, ctx: ClientContext) -> Message:
        """p_(C_i): the mean of the six graph properties over the client's training graphs
        (``client.py:split_traintest``), 6 floats sent once."""
        graphs = ctx.graph_data().graphs["train"]
        values = torch.stack([graph_properties(g.edge_index, g.num_nodes,
                                               self.options.entropy_form) for g in graphs])
        return Message({PROPERTY_VECTOR: values.mean(0).float()})

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        start = self.current(message, ctx)
        trained, stats = self.local_train(start, ctx)
        update = {k: trained[k] - v for k, v in start.items()}
        tensors = with_prefix(update, UPDATE)
        tensors[EMBEDDING] = self.functional_embedding(trained, ctx)
        return self.reply(tensors, ctx, stats)

    @torch.no_grad()
    def functional_embedding(self, params: Params, ctx: ClientContext) -> Tensor:
        """The log-softmax outputs of ``params`` (eval mode) on the random-graph batch, R x C
        flattened (``server.py:graph_modelembedding``, mode 'sum')."""
        ctx.trainer.model.eval()
        logits = ctx.trainer.forward(params, self._random_graphs(ctx))
        return F.log_softmax(logits, dim=1).reshape(-1).float()

    def _random_graphs(self, ctx: ClientContext) -> GraphBatch:
        if "random_graphs" not in ctx.cache:
            o = self.options
            graphs = random_graph_batch(o.random_graphs, _feature_dim(ctx), o.distinct_graphs,
                                        o.degree_feature)
            ctx.cache["random_graphs"] = collate_graphs(graphs, ctx.trainer.model,
                                                        ctx.trainer.device)
        return ctx.cache["random_graphs"]


def _feature_dim(ctx: ClientContext) -> int:
    """d_x, the width of the client's node features."""
    return next(g.x.shape[1] for graphs in ctx.graph_data().graphs.values() for g in graphs)
