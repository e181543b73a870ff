"""FGFL's client: motif vocabulary and initial prototypes at setup, the prototype regulariser
(Eq. 14) in local training, local prototypes uploaded with the update."""

from __future__ import annotations

from typing import cast

import torch
from torch import Tensor

from graphfed.algorithms.fgfl.options import FGFLOptions, motif_term
from graphfed.algorithms.rewards.base import RewardClient
from graphfed.data.motifs import MotifVocabulary, build_vocabulary
from graphfed.mechanisms.prototypes import member_means
from graphfed.messages import Message
from graphfed.protocol import ClientContext, Setup
from graphfed.tensors import Params
from graphfed.training.batches import GraphBatch, NodeBatch
from graphfed.training.trainer import BatchLoss


class FGFLClient(RewardClient):
    options: FGFLOptions
    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.use_prototypes = motif_term(self.options.use_prototypes, setup.level)

    def _vocabulary(self, ctx: ClientContext) -> MotifVocabulary:
        """The client's motif vocabulary: rebuilt from its training graphs where needed."""
        if "motifs" not in ctx.cache:
            o = self.options
            ctx.cache["motifs"] = build_vocabulary(ctx.graph_data().graphs["train"],
                                                   o.keep_fraction, o.max_ring, o.tfidf_one)
        return ctx.cache["motifs"]

    def answer_setup(self, message: Message, ctx: ClientContext) -> Message:
        vocabulary = self._vocabulary(ctx)
        tensors = {"motif_keys": vocabulary.encoded(), "motif_counts": vocabulary.counts.long()}
        if self.use_prototypes:
            embedding = ctx.trainer.embed(self.setup.initial_params, ctx.graph_data())
            prototypes, _ = member_means(embedding, vocabulary.membership.to(embedding.device))
            if self.options.initial_proto_norm == "clip_unit":
                prototypes = prototypes / prototypes.norm(dim=1, keepdim=True).clamp_min(1.0)
            tensors["prototypes"] = prototypes.float()
        return Message(tensors=tensors)

    def batch_loss(self, message: Message, ctx: ClientContext) -> BatchLoss | None:
        o = self.options
        if not self.use_prototypes or o.proto_weight == 0:
            return None
        membership = self._vocabulary(ctx).membership.to(message.tensors["prototypes"].device)
        target = message.tensors["prototypes"]
        seen = ctx.cache.setdefault("seen_embeddings", {})
        seen.clear()

        def loss(live: Params, batch: NodeBatch | GraphBatch, embedding: Tensor) -> Tensor:
            ids = cast(GraphBatch, batch).ids  # prototypes are graph-level
            if o.proto_from_train_pass:
                seen.update(zip(ids.tolist(), embedding.detach(), strict=True))
            if o.proto_scope == "dataset":
                full = ctx.graph_data().splits["train"].all()
                embedding = ctx.trainer.forward(live, full, with_embedding=True)[1]
                ids = full.ids
            means, present = member_means(embedding, membership[ids])
            if not present.any():
                return embedding.new_zeros(())
            diff = means[present] - target[present]
            dist = diff.pow(2).mean(1) if o.proto_distance == "mse" else diff.norm(dim=1)
            return o.proto_weight * (dist.mean() if o.proto_reduce == "mean" else dist.sum())

        return loss

    def upload(self, message: Message, ctx: ClientContext, trained: Params, update: Tensor
               ) -> Message:
        reply = super().upload(message, ctx, trained, update)
        if self.use_prototypes:
            membership = self._vocabulary(ctx).membership
            seen = ctx.cache.pop("seen_embeddings", {})
            if self.options.proto_from_train_pass and len(seen) == membership.shape[0]:
                embedding = torch.stack([seen[i] for i in range(len(seen))])
            else:
                embedding = ctx.trainer.embed(trained, ctx.graph_data())
            prototypes, present = member_means(embedding, membership.to(embedding.device))
            keep = message.tensors["prototypes"]
            reply.tensors["prototypes"] = torch.where(present.view(-1, 1), prototypes,
                                                      keep).float()
        return reply
