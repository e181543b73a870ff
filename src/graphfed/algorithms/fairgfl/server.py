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
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import Tensor

from graphfed.algorithms.averaging.fedavg import FedAvgServer
from graphfed.algorithms.fairgfl.encoder import encoder_message, train_encoder
from graphfed.algorithms.fairgfl.options import (
    ENCODINGS,
    EPS_LINK,
    EPS_NODE,
    LINKS,
    LOSS,
    FairGFLOptions,
)
from graphfed.data.federated import ClientData, FederatedData
from graphfed.errors import GraphfedError
from graphfed.mechanisms import overlap, privacy
from graphfed.messages import LOSS as LOSS_RANGE
from graphfed.messages import (
    NUM_SAMPLES,
    Message,
    ScalarRange,
    ScalarSpec,
    TensorSpec,
    fit_scalars,
    spec_of,
)
from graphfed.metrics import spearman
from graphfed.privacy.ledger import Release
from graphfed.protocol import Setup
from graphfed.training import PreparedClient
from graphfed.training.batches import PreparedNodeClient

BUDGET = ScalarRange(0.0)  # a privacy budget spent: finite, non-negative
LEDGER_NOTES = {  # what the ledger's LDP epsilons bound: the worst-off node's and link's
    "eps_node": "LDP per node: code_dim x eps_v = {o.code_dim} x {o.eps_v:g} per element",
    "eps_link": "LDP per node pair: eps_e = {o.eps_e:g}"}


def server_inputs(data: FederatedData, on_server: Callable[[ClientData], PreparedClient]
                  ) -> dict[str, Any]:
    """What FairGFL's server takes from the partition beyond its Setup: the public node pool
    (prepared on the server's device) and the true overlap ratios, either None where the
    partition has none."""
    public = None if data.public is None else on_server(data.public)
    return {"public": public, "overlap_truth": data.overlap}


class FairGFLServer(FedAvgServer):
    state_keys = (*FedAvgServer.state_keys, "estimates", "tau", "recall")
    options: FairGFLOptions

    def __init__(self, setup: Setup, public: PreparedClient | None = None,
                 overlap_truth: dict[str, Tensor] | None = None) -> None:
        """``public``: the partition's public node pool, the server's own data (on
        ``SERVER_DEVICE``), never a client's; ``overlap_truth``: the partition's true overlap
        ratios (``"node"``/``"link"``, N×N), which only an operator simulating the federation
        knows, for the oracle ablation and to score the estimates (``server_inputs``)."""
        super().__init__(setup)
        if not isinstance(public, PreparedNodeClient):
            raise GraphfedError("fairgfl trains its encoder on a public node pool the server "
                                "holds; use partition=fairgfl_overlap with a positive "
                                "partition.public_fraction")
        self.public, self.overlap_truth = public, overlap_truth
        self.estimates = overlap.empty_overlap_state(setup.num_clients)
        self.tau = float(self.options.tau or 0.0)
        self.recall = 1.0  # of tau's matches, measured when fairgfl.correct_recall is on
        self.last: dict = {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # a checkpoint from before fairgfl.correct_recall matched without a recall correction
        super().load_state_dict({"recall": 1.0, **state})

    # ------------------------------------------------------------ setup: the public encoder
    def configure_setup(self, clients: list[int]) -> dict[int, Message]:
        o = self.options
        x = self.public.graph.x.float()
        model = train_encoder(x, o)
        if o.tau is None or o.correct_recall:
            generator = torch.Generator().manual_seed(int(torch.randint(2**62, ())))
            with torch.no_grad():
                codes = model.encode(x)

            def privatise(c: Tensor) -> Tensor:
                return privacy.privatise_features(c, o.eps_v, generator, o.feature_mechanism,
                                                  levels=o.levels)

            if o.tau is None:
                self.tau = overlap.calibrate_threshold(codes, privatise, o.tau_quantile)
            if o.correct_recall:
                self.recall = overlap.match_recall(codes, privatise, self.tau)
                if self.recall == 0:
                    raise GraphfedError(f"fairgfl.correct_recall: no public node's two "
                                        f"releases fall under tau = {self.tau:g}; raise tau "
                                        f"or fairgfl.tau_quantile")
        message = Message(encoder_message(model))
        return {c: message for c in clients}

    # ------------------------------------------------------------ rounds
    def batch_size(self, client: int) -> int:
        """b_i = min(b, n_i), n_i from the partition (§7.5 F4)."""
        return min(self.options.batch_nodes, self.setup.client_sizes[client].nodes)

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        b = self.batch_size(client)
        spec = spec_of(self.params)
        spec[ENCODINGS] = ((b, self.options.code_dim), torch.float32)
        spec[LINKS] = ((math.ceil(b * b / 8),), torch.uint8)
        return spec, fit_scalars({LOSS: LOSS_RANGE, EPS_NODE: BUDGET, EPS_LINK: BUDGET})

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        if not replies:
            return
        o = self.options
        ids = sorted(replies)
        self._estimate(ids, replies)
        models = [{k: replies[c].tensors[k] for k in self.params} for c in ids]
        losses = [float(replies[c].scalars[LOSS]) for c in ids]
        weights = self._weights(ids, replies)
        half = self.average(models, weights, self.params)
        self.params = overlap.max_loss_step(half, self.params, models, losses, o.lambda_maxloss)
        self.last = {"clients": ids, "weights": [round(w, 6) for w in weights],
                     "worst_client": ids[max(range(len(ids)), key=losses.__getitem__)],
                     "eps_node": max(float(replies[c].scalars[EPS_NODE]) for c in ids),
                     "eps_link": max(float(replies[c].scalars[EPS_LINK]) for c in ids),
                     "upload_bytes": _largest_upload(replies.values(), set(self.params))}
        for message, key in (("fairgfl.features", "eps_node"), ("fairgfl.links", "eps_link")):
            self.record_release(Release(message, "pure", epsilon=self.last[key], cumulative=True,
                                        note=LEDGER_NOTES[key].format(o=o)))

    def _estimate(self, ids: list[int], replies: dict[int, Message]) -> None:
        """Step 3: every ordered pair of this round's clients, folded into the accumulated
        estimates."""
        o = self.options
        encodings = [replies[c].tensors[ENCODINGS] for c in ids]
        links = [privacy.unpack_bits(replies[c].tensors[LINKS], self.batch_size(c)) for c in ids]
        sizes = [self.setup.client_sizes[c].nodes for c in ids]
        node, link = overlap.round_overlaps(encodings, links, sizes, self.tau, o.link_scaling,
                                            self.recall)
        self.estimates = overlap.accumulate_overlaps(self.estimates, ids, node, link,
                                                     o.accumulate, o.kappa)

    def estimated(self) -> Tensor:
        """o_i of every client (Eq. 24) from the accumulated estimates."""
        return overlap.overall_overlap(self.estimates["node"], self.estimates["link"],
                                       self.options.gamma)

    def true_overall(self) -> Tensor | None:
        """o_i from the partition's true ratios (known only to a simulation)."""
        truth = self.overlap_truth
        if truth is None:
            return None
        return overlap.overall_overlap(truth["node"], truth["link"], self.options.gamma)

    def _weights(self, ids: list[int], replies: dict[int, Message]) -> list[float]:
        o = self.options
        sizes = [float(replies[c].scalars[NUM_SAMPLES]) for c in ids] if o.weighted else None
        if not o.fair_aggregation:
            return sizes or [1.0] * len(ids)
        overall = self.true_overall() if o.oracle_overlaps else self.estimated()
        if overall is None:
            raise GraphfedError("fairgfl.oracle_overlaps needs a partition that knows its true "
                                "overlaps (partition=fairgfl_overlap)")
        return overlap.fair_weights(overall[ids], self.setup.num_clients, o.weight_rule,
                                    sizes).tolist()

    def round_metrics(self) -> dict[str, Any]:
        if not self.last:
            return {}
        estimated = self.estimated()
        out = {**self.last, "tau": self.tau, "match_recall": self.recall,
               "overlap_estimated": _rounded(estimated)}
        true = self.true_overall()
        if true is not None and self.overlap_truth is not None:
            out["overlap_true"] = _rounded(true)
            out.update(estimation_quality(estimated, true, self.estimates["node"],
                                          self.overlap_truth["node"]))
        return out


def estimation_quality(estimated: Tensor, true: Tensor, node_estimates: Tensor,
                       node_truth: Tensor) -> dict[str, float]:
    """How well the estimates track the truth: the mean absolute error of the pairwise node
    ratios R_ij, the rank correlation of the clients' overall ratios o_i, and how well o_i
    separates clients that overlap from those that do not (the share of (overlapping,
    non-overlapping) pairs ranked correctly: an AUC); each absent while undefined."""
    off = ~torch.eye(len(node_truth), dtype=torch.bool)
    out = {"node_ratio_mae": float((node_estimates - node_truth.double()).abs()[off].mean())}
    corr = spearman(estimated.tolist(), true.tolist())
    if math.isfinite(corr):  # undefined while either side is constant
        out["overlap_rank_corr"] = corr
    shared, alone = estimated[true > 0], estimated[true == 0]
    if len(shared) and len(alone):
        above = (shared.view(-1, 1) > alone.view(1, -1)).double()
        ties = (shared.view(-1, 1) == alone.view(1, -1)).double()
        out["separation_auc"] = float((above + ties / 2).mean())
    return out


def _largest_upload(replies: Iterable[Message], model: set[str]) -> dict[str, int]:
    """Bytes of the largest reply's parts (Table IV: a client with b_i = b): the model, the
    privatised encodings and the packed links."""
    def size(message: Message, names: set[str]) -> int:
        return sum(t.numel() * t.element_size() for k, t in message.tensors.items() if k in names)

    return {"model": max(size(m, model) for m in replies),
            "features": max(size(m, {ENCODINGS}) for m in replies),
            "links": max(size(m, {LINKS}) for m in replies)}


def _rounded(values: Tensor) -> list[float]:
    return [round(float(v), 6) for v in values]
