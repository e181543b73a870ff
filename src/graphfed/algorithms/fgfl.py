"""FGFL (Pan et al., "Towards Fair Graph Federated Learning via Incentive Mechanisms", AAAI 2024).

On top of the gradient-reward protocol (``gradient_rewards``): an agent's value adds up its
gradient alignment and its graph diversity (share of the global motif vocabulary, Eq. 10); the
value pays a per-round payoff with punishment and delayed-contribution compensation (Eqs. 5-7);
and motif prototypes (mean graph embedding over the graphs containing a motif, Eq. 11), averaged
by value on the server (Eq. 12), regularise local training (Eq. 14). Motif vocabularies travel
once, in the setup exchange before round 1. Spec: ``shared/specs/fgfl.md``.
"""

from __future__ import annotations

import logging
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor

from graphfed.algorithms.base import Algorithm, Message, MessageError, register
from graphfed.algorithms.gradient_rewards import RewardClient, RewardOptions, RewardServer
from graphfed.data.motifs import KEY_WIDTH, build_vocabulary, decode_keys
from graphfed.incentives.payoff import fgfl_payoff, gradient_shapley
from graphfed.incentives.rewards import value_weights
from graphfed.metrics import pearson

log = logging.getLogger("graphfed.fgfl")


class FGFLOptions(RewardOptions):
    alpha1: float = Field(0.05, ge=0.0, description="weight of this round in the value update")
    alpha2: float = Field(1.0, ge=0.0, description="weight of diversity relative to alignment")
    proto_weight: float = Field(0.1, ge=0.0, description="lambda of the prototype regulariser")
    budget: float = Field(1.0, gt=0.0, description="payoff budget B per round")
    keep_fraction: float = Field(0.9, gt=0.0, le=1.0, description="beta_s of TF-IDF filtering")
    max_ring: int = Field(4, ge=3, le=4, description="longest ring kept as a motif")
    value_update: Literal["additive", "ema"] = "additive"
    use_alignment: bool = Field(True, description="ablation: drop phi from Eq. 10")
    use_diversity: bool = Field(True, description="ablation: alpha2 = 0")
    value_weighted_agg: bool = Field(True, description="ablation: size-weighted aggregate")
    use_prototypes: bool = Field(True, description="ablation: no prototypes, lambda = 0")
    proto_distance: Literal["mse", "l2"] = "mse"
    proto_reduce: Literal["mean", "sum"] = "mean"
    proto_scope: Literal["batch", "dataset"] = "batch"
    proto_from_train_pass: bool = Field(
        False, description="prototypes from embeddings seen during training (code) instead of "
        "an eval-mode pass after it")
    proto_weights: Literal["value", "per_motif_rep"] = "value"
    init_proto: Literal["mean", "count_weighted", "count_weighted_paper_eq19"] = "count_weighted"
    exact_shapley: bool = Field(
        False, description="also compute the exact gradient-Shapley value (2^N coalitions)")


def motif_means(embedding: Tensor, membership: Tensor) -> tuple[Tensor, Tensor]:
    """Mean embedding over the graphs containing each motif, and which motifs occur at all."""
    m = membership.to(embedding.dtype)
    counts = m.sum(0)
    return (m.t() @ embedding) / counts.clamp_min(1).view(-1, 1), counts > 0


class FGFLServer(RewardServer):
    def __init__(self, setup):
        super().__init__(setup)
        n = setup.num_clients
        self.codes: list[Tensor] = [torch.empty(0, dtype=torch.long) for _ in range(n)]
        self.diversity = torch.zeros(n, dtype=torch.float64)
        self.prototypes = torch.empty(0)
        self.proto_rep = torch.empty(0)
        self.value_sum = torch.zeros(n, dtype=torch.float64)
        self.value_rounds = 0
        self.payoff_total = torch.zeros(n, dtype=torch.float64)

    # ------------------------------------------------------------ setup: vocabularies
    def configure_setup(self, clients):
        return {c: Message() for c in clients}

    def aggregate_setup(self, replies):
        if len(replies) < self.setup.num_clients:
            missing = sorted(set(range(self.setup.num_clients)) - set(replies))
            raise MessageError(f"FGFL needs every agent's motif vocabulary; missing {missing}")
        keys = {}
        for c, m in sorted(replies.items()):
            enc, counts = m.tensors.get("motif_keys"), m.tensors.get("motif_counts")
            if enc is None or enc.dim() != 2 or enc.shape[1] != KEY_WIDTH or counts is None \
                    or counts.shape != (enc.shape[0],):
                raise MessageError(f"client {c}: malformed motif vocabulary")
            keys[c] = decode_keys(enc)
        vocabulary = sorted({k for ks in keys.values() for k in ks})
        code = {k: i for i, k in enumerate(vocabulary)}
        self.codes = [torch.tensor([code[k] for k in keys[c]], dtype=torch.long)
                      for c in range(self.setup.num_clients)]
        total = max(len(vocabulary), 1)
        self.diversity = torch.tensor([len(keys[c]) / total for c in sorted(keys)],
                                      dtype=torch.float64)
        if self.setup.options.use_prototypes:
            self.prototypes = self._initial_prototypes(replies, len(vocabulary))
            self.proto_rep = torch.ones(self.setup.num_clients, len(vocabulary),
                                        dtype=torch.float64)

    def _initial_prototypes(self, replies, size: int) -> Tensor:
        """Round-0 global prototypes (spec 3.6): mean, or weighted by motif graph counts."""
        mode = self.setup.options.init_proto
        dim = next(iter(replies.values())).tensors["prototypes"].shape[1]
        total = torch.zeros(size, dim, dtype=torch.float64)
        weight = torch.zeros(size, dtype=torch.float64)
        holders = torch.zeros(size, dtype=torch.float64)
        for c, m in replies.items():
            counts = m.tensors["motif_counts"].double()
            w = torch.ones_like(counts) if mode == "mean" else counts
            total.index_add_(0, self.codes[c], w.view(-1, 1) * m.tensors["prototypes"].double())
            weight.index_add_(0, self.codes[c], w)
            holders.index_add_(0, self.codes[c], torch.ones_like(counts))
        out = total / weight.clamp_min(1e-12).view(-1, 1)
        if mode == "count_weighted_paper_eq19":
            out = out / holders.clamp_min(1).view(-1, 1)
        return out.float()

    # ------------------------------------------------------------ messages
    def message_for(self, client):
        message = super().message_for(client)
        if self.setup.options.use_prototypes:
            message.tensors["prototypes"] = self.prototypes[self.codes[client]]
        return message

    def reply_spec(self, client):
        spec, scalars = super().reply_spec(client)
        if self.setup.options.use_prototypes:
            spec["prototypes"] = ((len(self.codes[client]), self.prototypes.shape[1]),
                                  torch.float32)
        return spec, scalars

    # ------------------------------------------------------------ valuation
    def aggregation_weights(self, clients):
        if self.setup.options.value_weighted_agg:
            return value_weights(self.values[clients])
        sizes = self.data_sizes[clients]
        return sizes / sizes.sum()

    def revalue(self, rnd, clients, updates, aggregate, alignment):
        o = self.setup.options
        values = self.values.clone()
        phi = alignment if o.use_alignment else torch.zeros_like(alignment)
        if o.value_update == "ema":
            values[clients] = 0.95 * values[clients] + 0.05 * phi
        else:
            diversity = self.diversity[clients] if o.use_diversity else 0.0
            values[clients] = values[clients] + o.alpha1 * (phi + o.alpha2 * diversity)
        total = values.sum()
        if abs(float(total)) < 1e-12:
            log.warning("round %d: agent values sum to ~0; left unnormalised", rnd)
            return values
        return values / total

    def after_aggregate(self, rnd, clients, updates, replies):
        o = self.setup.options
        past = (self.value_sum / self.value_rounds).tolist() if self.value_rounds else None
        payoff = torch.tensor(fgfl_payoff(self.values.tolist(), past, o.budget),
                              dtype=torch.float64)
        self.value_sum += self.values
        self.value_rounds += 1
        self.payoff_total += payoff
        self.last.update(payoff=payoff.tolist(), payoff_total=self.payoff_total.tolist(),
                         diversity=self.diversity.tolist())
        if o.use_prototypes:
            self._aggregate_prototypes(clients, replies)
            self.last["prototype_bytes"] = 4 * sum(int(self.codes[c].numel()) for c in clients
                                                   ) * int(self.prototypes.shape[1])
        if o.exact_shapley:
            weights = torch.tensor(self.last["weights"], dtype=torch.float64)
            aggregate = (weights.view(-1, 1) * updates).sum(0)
            shapley = gradient_shapley(updates, weights, aggregate)
            alignment = self.last["alignment"]
            self.last.update(
                shapley=shapley, shapley_alignment_pearson=pearson(shapley, alignment),
                shapley_sign_agreement=sum((s > 0) == (a > 0) for s, a in zip(
                    shapley, alignment, strict=True)) / len(shapley))

    def _aggregate_prototypes(self, clients, replies):
        """Eq. 12: per motif, the ReLU(value)-weighted mean over the agents holding it (or the
        per-motif reputation variant of the code); a motif nobody weighs keeps its prototype."""
        size, dim = self.prototypes.shape
        total = torch.zeros(size, dim, dtype=torch.float64)
        weight = torch.zeros(size, dtype=torch.float64)
        for c in clients:
            local = replies[c].tensors["prototypes"].double()
            codes = self.codes[c]
            if self.setup.options.proto_weights == "value":
                w = torch.full((len(codes),), float(self.values[c].clamp_min(0)),
                               dtype=torch.float64)
            else:
                cos = F.cosine_similarity(local, self.prototypes[codes].double(), dim=1)
                self.proto_rep[c, codes] = (0.95 * self.proto_rep[c, codes]
                                            + 0.05 * cos).clamp_min(1e-3)
                w = self.proto_rep[c, codes]
            total.index_add_(0, codes, w.view(-1, 1) * local)
            weight.index_add_(0, codes, w)
        update = weight > 0
        self.prototypes[update] = (total[update] / weight[update].view(-1, 1)).float()

    def state_dict(self):
        return {**super().state_dict(), "codes": self.codes, "diversity": self.diversity,
                "prototypes": self.prototypes, "proto_rep": self.proto_rep,
                "value_sum": self.value_sum, "value_rounds": self.value_rounds,
                "payoff_total": self.payoff_total}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        for key in ("codes", "diversity", "prototypes", "proto_rep", "value_sum",
                    "value_rounds", "payoff_total"):
            setattr(self, key, state[key])


class FGFLClient(RewardClient):
    def _vocabulary(self, ctx):
        if "motifs" not in ctx.state:
            ctx.state["motifs"] = build_vocabulary(ctx.data.graphs["train"],
                                                   self.options.keep_fraction,
                                                   self.options.max_ring)
        return ctx.state["motifs"]

    def answer_setup(self, message, ctx):
        vocabulary = self._vocabulary(ctx)
        tensors = {"motif_keys": vocabulary.encoded(), "motif_counts": vocabulary.counts.long()}
        if self.options.use_prototypes:
            embedding = ctx.trainer.embed(self.setup.initial_params, ctx.data)
            prototypes, _ = motif_means(embedding, vocabulary.membership.to(embedding.device))
            tensors["prototypes"] = (prototypes / prototypes.norm(dim=1, keepdim=True
                                                                  ).clamp_min(1.0)).float()
        return Message(tensors=tensors)

    def batch_loss(self, message, ctx):
        o = self.options
        if not o.use_prototypes or o.proto_weight == 0:
            return None
        membership = self._vocabulary(ctx).membership.to(message.tensors["prototypes"].device)
        target = message.tensors["prototypes"]
        seen = ctx.state.setdefault("seen_embeddings", {})
        seen.clear()

        def loss(live, batch, embedding):
            ids = batch.ids
            if o.proto_from_train_pass:
                seen.update(zip(ids.tolist(), embedding.detach(), strict=True))
            if o.proto_scope == "dataset":
                full = ctx.data.splits["train"].all()
                embedding = ctx.trainer.forward(live, full, with_embedding=True)[1]
                ids = full.ids
            means, present = motif_means(embedding, membership[ids])
            if not present.any():
                return embedding.new_zeros(())
            diff = means[present] - target[present]
            dist = diff.pow(2).mean(1) if o.proto_distance == "mse" else diff.norm(dim=1)
            return o.proto_weight * (dist.mean() if o.proto_reduce == "mean" else dist.sum())

        return loss

    def upload(self, message, ctx, trained, update):
        reply = super().upload(message, ctx, trained, update)
        if self.options.use_prototypes:
            membership = self._vocabulary(ctx).membership
            seen = ctx.state.pop("seen_embeddings", {})
            if self.options.proto_from_train_pass and len(seen) == membership.shape[0]:
                embedding = torch.stack([seen[i] for i in range(len(seen))])
            else:
                embedding = ctx.trainer.embed(trained, ctx.data)
            prototypes, present = motif_means(embedding, membership.to(embedding.device))
            keep = message.tensors["prototypes"]
            reply.tensors["prototypes"] = torch.where(present.view(-1, 1), prototypes,
                                                      keep).float()
        return reply


FGFL = register(Algorithm("fgfl", FGFLServer, FGFLClient, FGFLOptions, levels=("graph",),
                          description="FGFL: valued agents, sparsified rewards, payoffs and "
                          "motif prototypes"))
