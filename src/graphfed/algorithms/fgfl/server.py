"""FGFL's server: vocabularies at setup, valuation (Eq. 10), payoff (Eqs. 5-7) and the
value-weighted prototype aggregate (Eq. 12) on top of the gradient-reward round."""

from __future__ import annotations

import copy
import logging

import torch
import torch.nn.functional as F
from torch import Tensor

from graphfed.algorithms.averaging.leave_one_out import RECORD, ContributionProbe, GlobalTest
from graphfed.algorithms.fgfl.options import FGFLOptions, motif_term
from graphfed.algorithms.rewards.base import RewardServer
from graphfed.data.motifs import KEY_WIDTH, decode_keys
from graphfed.mechanisms.payoff import fgfl_payoff, gradient_shapley
from graphfed.mechanisms.sparse_rewards import value_weights
from graphfed.messages import Message, MessageError, ScalarSpec, TensorSpec
from graphfed.metrics import pearson
from graphfed.protocol import Setup
from graphfed.tensors import Params

log = logging.getLogger("graphfed.fgfl")


class FGFLServer(RewardServer):
    options: FGFLOptions
    state_keys = (*RewardServer.state_keys, "codes", "diversity", "prototypes", "proto_rep",
                  "value_sum", "value_rounds", "payoff_total")

    def __init__(self, setup: Setup, global_test: GlobalTest | None = None) -> None:
        super().__init__(setup)
        self.probe = ContributionProbe.of(setup, global_test)
        self.use_diversity = motif_term(self.options.use_diversity, setup.level)
        self.use_prototypes = motif_term(self.options.use_prototypes, setup.level)
        n = setup.num_clients
        self.codes: list[Tensor] = [torch.empty(0, dtype=torch.long) for _ in range(n)]
        self.diversity = torch.zeros(n, dtype=torch.float64)
        self.prototypes = torch.empty(0)
        self.proto_rep = torch.empty(0)
        self.value_sum = torch.zeros(n, dtype=torch.float64)
        self.value_rounds = 0
        self.payoff_total = torch.zeros(n, dtype=torch.float64)

    # ------------------------------------------------------------ setup: vocabularies
    def configure_setup(self, clients: list[int]) -> dict[int, Message]:
        """Vocabularies travel only where motifs exist: at graph level."""
        return {c: Message() for c in clients} if self.setup.level == "graph" else {}

    def setup_reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        spec = {"motif_keys": ((-1, -1), torch.long), "motif_counts": ((-1,), torch.long)}
        if self.use_prototypes:
            spec["prototypes"] = ((-1, -1), torch.float32)
        return spec, {}

    def check_setup_reply(self, client: int, message: Message) -> None:
        """A vocabulary the server can decode: one count and (with prototypes) one prototype
        per key, valid key lengths, no repeated key, no negative count."""
        enc, counts = message.tensors["motif_keys"], message.tensors["motif_counts"]
        k, width = enc.shape
        prototypes = message.tensors.get("prototypes")
        if width < KEY_WIDTH or counts.shape != (k,) or (
                prototypes is not None and prototypes.shape[0] != k):
            raise MessageError(f"client {client}: motif keys {tuple(enc.shape)}, counts "
                               f"{tuple(counts.shape)} and prototypes disagree")
        if k and (enc[:, 1].min() < 0 or enc[:, 1].max() > width - 2 or counts.min() < 0):
            raise MessageError(f"client {client}: motif key lengths or counts out of range")
        if len(set(decode_keys(enc))) != k:
            raise MessageError(f"client {client}: its motif vocabulary repeats a key")

    def aggregate_setup(self, replies: dict[int, Message]) -> None:
        if len(replies) < self.setup.num_clients:
            missing = sorted(set(range(self.setup.num_clients)) - set(replies))
            raise MessageError(f"FGFL needs every agent's motif vocabulary; missing or "
                               f"malformed: clients {missing}")
        dims = {m.tensors["prototypes"].shape[1] for m in replies.values()
                if "prototypes" in m.tensors}
        if len(dims) > 1:
            raise MessageError(f"FGFL's clients sent prototypes of different widths {dims}")
        keys = {c: decode_keys(m.tensors["motif_keys"]) for c, m in sorted(replies.items())}
        vocabulary = sorted({k for ks in keys.values() for k in ks})
        code = {k: i for i, k in enumerate(vocabulary)}
        self.codes = [torch.tensor([code[k] for k in keys[c]], dtype=torch.long)
                      for c in range(self.setup.num_clients)]
        total = max(len(vocabulary), 1)
        self.diversity = torch.tensor([len(keys[c]) / total for c in sorted(keys)],
                                      dtype=torch.float64)
        if self.use_prototypes:
            self.prototypes = self._initial_prototypes(replies, len(vocabulary))
            self.proto_rep = torch.ones(self.setup.num_clients, len(vocabulary),
                                        dtype=torch.float64)

    def _initial_prototypes(self, replies: dict[int, Message], size: int) -> Tensor:
        """Round-0 global prototypes (spec 3.6): mean, or weighted by motif graph counts."""
        mode = self.options.init_proto
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
    def message_for(self, client: int) -> Message:
        message = super().message_for(client)
        if self.use_prototypes:
            message.tensors["prototypes"] = self.prototypes[self.codes[client]]
        return message

    def reply_spec(self, client: int) -> tuple[TensorSpec, ScalarSpec]:
        spec, scalars = super().reply_spec(client)
        if self.use_prototypes:
            spec["prototypes"] = ((len(self.codes[client]), self.prototypes.shape[1]),
                                  torch.float32)
        return spec, scalars

    # ------------------------------------------------------------ the round
    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        """The round; with ``leave_one_out``, first the same round without each agent in turn
        (``_rerun``), scored against the round's own global model."""
        if self.probe is None:
            super().aggregate_fit(rnd, replies)
            return
        clients = sorted(replies)
        without = self.probe.leave_out(
            clients, lambda rest: self._rerun(rnd, {c: replies[c] for c in rest}))
        super().aggregate_fit(rnd, replies)
        self.last[RECORD] = self.probe.record(clients, without, self.params)

    def _rerun(self, rnd: int, replies: dict[int, Message]) -> Params:
        """The global model this round's aggregation makes of ``replies`` alone: Eq. 13's
        value weights renormalised over them, from the round's starting values and model; the
        server's state (``state_keys``) is restored after it."""
        saved = copy.deepcopy(self.state_dict())
        super().aggregate_fit(rnd, replies)
        params = self.params
        self.load_state_dict(saved)
        return params

    # ------------------------------------------------------------ valuation
    def aggregation_weights(self, clients: list[int]) -> Tensor:
        if self.options.value_weighted_agg:
            return value_weights(self.values[clients])
        sizes = self.data_sizes[clients]
        return sizes / sizes.sum()

    def revalue(self, rnd: int, clients: list[int], updates: Tensor, aggregate: Tensor,
                alignment: Tensor) -> Tensor:
        o = self.options
        values = self.values.clone()
        phi = alignment if o.use_alignment else torch.zeros_like(alignment)
        if o.value_update == "ema":
            values[clients] = 0.95 * values[clients] + 0.05 * phi
        else:
            diversity = self.diversity[clients] if self.use_diversity else 0.0
            values[clients] = values[clients] + o.alpha1 * (phi + o.alpha2 * diversity)
        total = values.sum()
        if abs(float(total)) < 1e-12:
            log.warning("round %d: agent values sum to ~0; left unnormalised", rnd)
            return values
        return values / total

    def after_aggregate(self, rnd: int, clients: list[int], updates: Tensor,
                        replies: dict[int, Message]) -> None:
        o = self.options
        past = (self.value_sum / self.value_rounds).tolist() if self.value_rounds else None
        payoff = torch.tensor(fgfl_payoff(self.values.tolist(), past, o.budget),
                              dtype=torch.float64)
        self.value_sum += self.values
        self.value_rounds += 1
        self.payoff_total += payoff
        self.last.update(payoff=payoff.tolist(), payoff_total=self.payoff_total.tolist())
        if self.setup.level == "graph":  # no vocabularies, so no diversity, at node level
            self.last["diversity"] = self.diversity.tolist()
        if self.use_prototypes:
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

    def _aggregate_prototypes(self, clients: list[int], replies: dict[int, Message]) -> None:
        """Eq. 12: per motif, the ReLU(value)-weighted mean over the agents holding it (or the
        per-motif reputation variant of the code); a motif nobody weighs keeps its prototype."""
        size, dim = self.prototypes.shape
        total = torch.zeros(size, dim, dtype=torch.float64)
        weight = torch.zeros(size, dtype=torch.float64)
        for c in clients:
            local = replies[c].tensors["prototypes"].double()
            codes = self.codes[c]
            if self.options.proto_weights == "value":
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
