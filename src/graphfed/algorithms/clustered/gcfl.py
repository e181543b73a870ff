"""GCFL and GCFL+ (Xie, Ma, Xiong, Yang, "Federated graph classification over non-IID graphs",
NeurIPS 2021): clustered FL where only the message-passing layers are shared within a cluster.

Each round every client trains its whole model and uploads the change of its convolution layers;
the server adds the size-weighted mean change of the client's cluster to the client's
start-of-round convolutions (the other layers stay personal). ``shared_params=all`` shares every
parameter instead, and takes the update norms over all of them: how the GPFL authors' code
(Jiachen2cc/Graph-Personalized-Federated-Learning) runs GCFL, its shared names being every key of
the server model (client.py:138; server.py:86-124). A cluster is bi-partitioned (the
Stoer-Wagner minimum cut) once training has settled for it — mean update norm below ``eps1``
while some member's update norm stays above ``eps2``, after ``warmup`` rounds, with more than two
members. GCFL cuts the graph of pairwise cosine similarities (+1) of this round's updates; GCFL+
cuts by the DTW distances between the members' sequences of update norms over the last
``seq_length`` rounds (GCFL's code uses the conv-gradient norm of the last batch; we use the
norm of the conv update, its ``dWs`` variant). Defaults are the GCFL code's one-dataset
ones (main_oneDS.py: epsilon1 0.05, epsilon2 0.1, seq_length 5; the 20-round warm-up is in
training.py). Its runnerfile overrides them per dataset: PROTEINS 0.03 / 0.06 / 10,
IMDB-BINARY 0.025 / 0.045 / 5, NCI1 0.04 / 0.08 / 5 (10, 10 and 30 clients). There is no
global model.

A client's cluster mean reaches it with its next message, tagged with the count of fits the
client had completed when it sent the update; the client applies it only while that count is
still its own. So a client left out of a round keeps its pending mean until it next trains, and
one whose reply was dropped after it trained never applies a stale mean.

Node level (FedSpray's baseline; our adaptation, FedSpray does not say how it ran GCFL): the same
protocol on the node GNN. ``convs`` are then its message-passing layers; in ``NodeClassifier``
(gcn, sage, gat, mlp, sgc) the last of them outputs the class logits, so ``convs`` is every
parameter and a cluster shares its whole model (clustered FedAvg); in ``mlp_sage`` the reduction
layer and the classifier stay with each client. ``convs_but_last`` is the alternative that keeps
the node model's last layer (its classifier) personal, as GCFL keeps its graph readout.
"""

from __future__ import annotations

from typing import Any, ClassVar, cast

import torch
from pydantic import Field
from torch import Tensor

from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.algorithms.registry import ANY_TASK, AT_NODE_LEVEL, Algorithm, RunView, register
from graphfed.mechanisms.clustering import min_cut
from graphfed.mechanisms.updates import LayerScope, add_flat, delta, shared_names
from graphfed.messages import NUM_SAMPLES, Message, ScalarRange, ScalarSpec, TensorSpec, fit_scalars
from graphfed.protocol import AlgorithmOptions, ClientContext, Server, Setup
from graphfed.tensors import Params

FITS = "fit"  # reply scalar: the client's fits so far, which tags the mean it is sent back


class GCFLOptions(AlgorithmOptions):
    eps1: float = Field(0.05, gt=0.0, description="split when the mean update norm < eps1")
    eps2: float = Field(0.1, gt=0.0, description="... and its largest update norm > eps2")
    warmup: int = Field(20, ge=0, description="no split before this round")
    shared_params: LayerScope = Field(
        "convs", description="parameters a cluster averages and whose update norms decide a "
        "split: the message-passing layers (GCFL's paper and code), or all (the GPFL code); "
        "at node level convs_but_last keeps the classifier layer local (our alternative)")


def check_scope(run: RunView) -> None:
    """``convs_but_last`` needs a message-passing layer before the last one."""
    options = cast(GCFLOptions, run.algorithm_options())
    if options.shared_params == "convs_but_last" and (
            run.model.layers < 2 or (run.level == "node" and run.model.name == "sgc")):
        raise ValueError("shared_params=convs_but_last needs a model with two or more "
                         "message-passing layers (model.layers >= 2, not sgc)")


class GCFLServer(Server):
    options: GCFLOptions
    state_keys: ClassVar[tuple[str, ...]] = ("clusters", "updates", "tags", "splits")

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.names = shared_names(setup.initial_params, self.options.shared_params)
        self.dim = sum(setup.initial_params[k].numel() for k in self.names)
        self.clusters: list[list[int]] = [list(range(setup.num_clients))]
        self.updates: dict[int, torch.Tensor] = {}  # each client's pending cluster mean
        self.tags: dict[int, int] = {}  # the client's fit count that mean belongs to
        self.splits: list[int] = []  # rounds in which a cluster was split

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        return {c: Message({"cluster_update": self.updates.get(c, torch.zeros(self.dim))},
                           {"for_fit": self.tags.get(c, 0)}) for c in clients}

    configure_evaluate = configure_fit

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        return {"update": ((self.dim,), torch.float32)}, fit_scalars(
            {FITS: ScalarRange(1, integer=True)})

    def split_cluster(self, rnd: int, members: list[int], updates: dict[int, torch.Tensor]
                      ) -> tuple[list[int], list[int]]:
        """GCFL: cut the pairwise cosine similarities (+1, non-negative) of the updates."""
        u = torch.stack([updates[c].double() for c in members])
        unit = u / u.norm(dim=1, keepdim=True).clamp_min(1e-12)
        return min_cut((unit @ unit.t() + 1).numpy(), members)

    def ready_to_split(self, rnd: int, members: list[int]) -> bool:
        return True

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        updates = {c: m.tensors["update"] for c, m in replies.items()}
        sizes = {c: float(m.scalars[NUM_SAMPLES]) for c, m in replies.items()}
        self.record(updates)
        o = self.options
        clusters = []
        for cluster in self.clusters:
            members = [c for c in cluster if c in updates]
            if len(members) > 2 and rnd > o.warmup and self.ready_to_split(rnd, members):
                norms = torch.stack([updates[c].double().norm() for c in members])
                mean = torch.stack([updates[c].double() for c in members]).mean(0).norm()
                if mean < o.eps1 and norms.max() > o.eps2:
                    left, right = self.split_cluster(rnd, members, updates)
                    absent = [c for c in cluster if c not in members]  # stay with the first part
                    clusters += [sorted(left + absent), right]
                    self.splits.append(rnd)
                    continue
            clusters.append(cluster)
        self.clusters = clusters
        for cluster in self.clusters:
            members = [c for c in cluster if c in updates]
            if not members:
                continue
            total = sum(sizes[c] for c in members)
            mean = cast(Tensor, sum(updates[c].double() * sizes[c] for c in members)) / total
            self.updates.update({c: mean.float() for c in members})
            self.tags.update({c: int(replies[c].scalars[FITS]) for c in members})

    def record(self, updates: dict[int, torch.Tensor]) -> None:
        """Per-round bookkeeping before clustering (GCFL+: the update-norm sequences)."""

    def round_metrics(self) -> dict[str, Any]:
        # copies: a round's record must not grow with later splits
        return {"clusters": [list(c) for c in self.clusters], "splits": list(self.splits)}


class GCFLClient(PersonalClient):
    """Keeps its whole model; its shared parameters move only by its cluster's mean update."""

    options: GCFLOptions

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.names = shared_names(setup.initial_params, self.options.shared_params)

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        if int(message.scalars.get("for_fit", 0)) != ctx.state.get("fits", 0):
            return params  # a mean for an earlier fit, which this client has moved past
        return add_flat(params, message.tensors["cluster_update"].to(params[self.names[0]].dtype),
                        self.names)

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        start = self.current(message, ctx)
        trained, stats = self.local_train(start, ctx)
        update = delta(trained, start, self.names)
        # the shared parameters go back to where the round started; the cluster mean comes next
        ctx.state["params"] = {k: start[k] if k in self.names else v for k, v in trained.items()}
        ctx.state["fits"] = ctx.state.get("fits", 0) + 1
        return self.reply({"update": update.float()}, ctx, stats, **{FITS: ctx.state["fits"]})


GCFL = register(Algorithm(
    "gcfl", GCFLServer, GCFLClient, GCFLOptions,
    family="clustered",
    tasks=ANY_TASK,
    paper="Xie et al., NeurIPS 2021 (GCFL)",
    levels=("graph", "node", "edge"),
    check=check_scope,
    sparse_features=True,
    modes={"all": ("gcfl.shared_params=all",), "node": AT_NODE_LEVEL},
    description="clustered FL sharing the message-passing layers (cosine min-cut)"))
