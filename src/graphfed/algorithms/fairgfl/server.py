"""FairGFL's server (Algorithm 2; spec §3.3-§3.5, §3.7): before round 1 it trains the public
encoder on its own public nodes, calibrates the matching distance τ, and sends the encoder; each
round it estimates every pair's node and link overlap from the clients' privatised mini-batches,
accumulates the estimates, weighs the clients by their overall overlap (Eqs. 24-25), averages,
and takes one pseudo-gradient step on the max-loss term (Eq. 27).

What the server reads from a client: its model, its privatised mini-batch (whose size must fit
the client's node count, which the server knows from the partition, never from the client) and
the loss of the received model on its training nodes. That loss is the client's own claim, as
in every max-loss or q-FFL method; it only picks the client whose model the max-loss step moves
towards, and it must be a finite non-negative number.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from graphfed.algorithms.averaging.fedavg import FedAvgServer
from graphfed.algorithms.fairgfl.encoder import encoder_message, train_encoder
from graphfed.algorithms.fairgfl.options import ENCODINGS, LINKS, LOSS, FairGFLOptions
from graphfed.errors import GraphfedError
from graphfed.mechanisms import overlap, privacy
from graphfed.protocol import NUM_SAMPLES, Message, MessageError, Setup, spec_of


class FairGFLServer(FedAvgServer):
    state_keys = (*FedAvgServer.state_keys, "estimates", "tau")

    def __init__(self, setup: Setup):
        super().__init__(setup)
        if not setup.client_sizes:
            raise GraphfedError("fairgfl needs every client's node count from the partition")
        self.options: FairGFLOptions = setup.options
        self.estimates = overlap.empty_estimates(setup.num_clients)
        self.tau = torch.tensor(self.options.tau or 0.0, dtype=torch.float64)
        self.last: dict = {}

    # ------------------------------------------------------------ setup: the public encoder
    def configure_setup(self, clients):
        public = self.setup.public
        if public is None:
            raise GraphfedError("fairgfl trains its encoder on a public node pool the server "
                                "holds; use partition=fairgfl_overlap (partition.public_fraction "
                                "> 0)")
        o = self.options
        model = train_encoder(public.graph.x.float(), o)
        if o.tau is None:
            with torch.no_grad():
                codes = model.encode(public.graph.x.float())
            self.tau = torch.tensor(overlap.calibrate_tau(
                codes, o.eps_v, o.levels, o.feature_mechanism, o.tau_quantile),
                dtype=torch.float64)
        message = Message(encoder_message(model))
        return {c: message for c in clients}

    # ------------------------------------------------------------ rounds
    def batch_size(self, client: int) -> int:
        return min(self.options.batch_nodes, self.setup.client_sizes[client].nodes)

    def reply_spec(self, client):
        b = self.batch_size(client)
        spec = spec_of(self.params)
        spec[ENCODINGS] = ((b, self.options.code_dim), torch.float32)
        spec[LINKS] = ((privacy.packed_size(b),), torch.uint8)
        return spec, (NUM_SAMPLES, LOSS)

    def check_reply(self, client, message):
        loss = message.scalars[LOSS]
        if isinstance(loss, bool) or loss < 0:
            raise MessageError(f"client {client}: {LOSS} must be a non-negative loss, "
                               f"got {loss!r}")

    def aggregate_fit(self, rnd, replies):
        if not replies:
            return
        o = self.options
        ids = sorted(replies)
        self._estimate(ids, replies)
        models = [{k: replies[c].tensors[k] for k in self.params} for c in ids]
        weights = self._weights(ids, replies)
        half = self.average(models, weights, self.params)
        worst = max(ids, key=lambda c: float(replies[c].scalars[LOSS]))
        self.params = overlap.max_loss_step(half, self.params, models[ids.index(worst)],
                                            o.lambda_maxloss)
        self.last = {"clients": ids, "weights": weights, "worst_client": worst}

    def _estimate(self, ids: list[int], replies) -> None:
        """Step 3: every pair of this round's clients, both ways, folded into the
        accumulated estimates."""
        o = self.options
        batches = {c: (replies[c].tensors[ENCODINGS],
                       privacy.unpack_bits(replies[c].tensors[LINKS], self.batch_size(c)))
                   for c in ids}
        sizes = {c: self.setup.client_sizes[c].nodes for c in ids}
        fresh = overlap.round_estimates(batches, sizes, float(self.tau), o.link_scaling)
        overlap.accumulate(self.estimates, fresh, o.accumulate, o.kappa)

    def overall(self) -> Tensor:
        """o_i of every client (Eq. 24), from the estimates or, as an oracle, the truth."""
        truth = self.setup.overlap_truth
        if self.options.oracle_overlaps:
            if truth is None:
                raise GraphfedError("fairgfl.oracle_overlaps needs a partition that knows its "
                                    "true overlaps (partition=fairgfl_overlap)")
            return overlap.overall_overlap(truth["node"], truth["link"], self.options.gamma)
        return overlap.overall_overlap(self.estimates["node"], self.estimates["link"],
                                       self.options.gamma)

    def _weights(self, ids: list[int], replies) -> list[float]:
        o = self.options
        if not o.fair_aggregation:
            return self.weights(replies) if o.size_aware else [1.0] * len(ids)
        sizes = [float(replies[c].scalars[NUM_SAMPLES]) for c in ids] if o.size_aware else None
        p = overlap.fair_weights(self.overall()[ids], self.setup.num_clients, o.weight_rule,
                                 sizes)
        return p.tolist()

    def round_metrics(self):
        if not self.last:
            return {}
        out = {**self.last, "overlap_estimated": _rounded(self.overall()),
               "tau": float(self.tau)}
        truth = self.setup.overlap_truth
        if truth is not None:
            true = overlap.overall_overlap(truth["node"], truth["link"], self.options.gamma)
            out["overlap_true"] = _rounded(true)
            out.update(overlap.estimation_quality(self.estimates, truth))
        return out


def _rounded(values: Tensor) -> list[float]:
    return [round(float(v), 6) if math.isfinite(float(v)) else None for v in values]
