"""GCFL and GCFL+ (Xie, Ma, Xiong, Yang, "Federated graph classification over non-IID graphs",
NeurIPS 2021): clustered FL where only the message-passing layers are shared within a cluster.

Each round every client trains its whole model and uploads the change of its convolution layers;
the server adds the size-weighted mean change of the client's cluster to the client's
start-of-round convolutions (the other layers stay personal). A cluster is bi-partitioned (the
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
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import torch
from pydantic import Field

from graphfed.algorithms.base import Algorithm, AlgorithmOptions, Message, Server, Setup, register
from graphfed.algorithms.personal import PersonalClient
from graphfed.algorithms.updates import add_flat, delta, shared_names


class GCFLOptions(AlgorithmOptions):
    eps1: float = Field(0.05, gt=0.0, description="split when the mean update norm < eps1")
    eps2: float = Field(0.1, gt=0.0, description="... and its largest update norm > eps2")
    warmup: int = Field(20, ge=0, description="no split before this round")


class GCFLPlusOptions(GCFLOptions):
    seq_length: int = Field(5, ge=2, description="update-norm sequence length for DTW")
    standardize: bool = Field(False, description="divide each sequence by its std before DTW")


def dtw_distance(a: np.ndarray, b: np.ndarray) -> float:
    """Dynamic time warping distance: sqrt of the least summed squared difference over
    monotone alignments of the two sequences."""
    n, m = len(a), len(b)
    cost = np.full((n + 1, m + 1), np.inf)
    cost[0, 0] = 0.0
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            cost[i, j] = (a[i - 1] - b[j - 1]) ** 2 + min(cost[i - 1, j], cost[i, j - 1],
                                                           cost[i - 1, j - 1])
    return float(np.sqrt(cost[n, m]))


def min_cut(similarity: np.ndarray, members: list[int]) -> tuple[list[int], list[int]]:
    """Stoer-Wagner minimum cut of the complete graph weighted by ``similarity``."""
    g = nx.Graph()
    for i in range(len(members)):
        for j in range(i + 1, len(members)):  # cos + 1 may round below 0 for opposite updates
            g.add_edge(i, j, weight=max(0.0, float(similarity[i, j])))
    _, (left, right) = nx.stoer_wagner(g)
    return sorted(members[i] for i in left), sorted(members[i] for i in right)


class GCFLServer(Server):
    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.names = shared_names(setup.initial_params, "convs")
        self.dim = sum(setup.initial_params[k].numel() for k in self.names)
        self.clusters: list[list[int]] = [list(range(setup.num_clients))]
        self.updates: dict[int, torch.Tensor] = {}  # each client's pending cluster mean
        self.tags: dict[int, int] = {}  # the client's fit count that mean belongs to
        self.splits: list[int] = []  # rounds in which a cluster was split

    def configure_fit(self, rnd, clients):
        return {c: Message({"cluster_update": self.updates.get(c, torch.zeros(self.dim))},
                           {"for_fit": self.tags.get(c, 0)}) for c in clients}

    configure_evaluate = configure_fit

    def reply_spec(self, client):
        return {"update": ((self.dim,), torch.float32)}, ("num_samples", "fit")

    def split_cluster(self, rnd: int, members: list[int], updates: dict[int, torch.Tensor]
                      ) -> tuple[list[int], list[int]]:
        """GCFL: cut the pairwise cosine similarities (+1, non-negative) of the updates."""
        u = torch.stack([updates[c].double() for c in members])
        unit = u / u.norm(dim=1, keepdim=True).clamp_min(1e-12)
        return min_cut((unit @ unit.t() + 1).numpy(), members)

    def ready_to_split(self, rnd: int, members: list[int]) -> bool:
        return True

    def aggregate_fit(self, rnd, replies):
        updates = {c: m.tensors["update"] for c, m in replies.items()}
        sizes = {c: float(m.scalars["num_samples"]) for c, m in replies.items()}
        self.record(updates)
        o = self.setup.options
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
            mean = sum(updates[c].double() * sizes[c] for c in members) / total
            self.updates.update({c: mean.float() for c in members})
            self.tags.update({c: int(replies[c].scalars["fit"]) for c in members})

    def record(self, updates: dict[int, torch.Tensor]) -> None:
        """Per-round bookkeeping before clustering (GCFL+: the update-norm sequences)."""

    def round_metrics(self):
        return {"clusters": self.clusters, "splits": self.splits}

    def state_dict(self):
        return {"clusters": self.clusters, "updates": self.updates, "tags": self.tags,
                "splits": self.splits}

    def load_state_dict(self, state):
        self.clusters, self.updates = state["clusters"], state["updates"]
        self.tags, self.splits = state.get("tags", {}), state["splits"]


class GCFLPlusServer(GCFLServer):
    def __init__(self, setup):
        super().__init__(setup)
        self.sequences: dict[int, list[float]] = {c: [] for c in range(setup.num_clients)}

    def record(self, updates):
        for c, u in updates.items():
            self.sequences[c].append(float(u.double().norm()))

    def ready_to_split(self, rnd, members):
        return all(len(s) >= self.setup.options.seq_length for s in self.sequences.values())

    def split_cluster(self, rnd, members, updates):
        """GCFL+: cut max(D) - D for the DTW distances D of the update-norm sequences."""
        o = self.setup.options
        seqs = [np.array(self.sequences[c][-o.seq_length:]) for c in members]
        if o.standardize:
            seqs = [s / max(s.std(), 1e-12) for s in seqs]
        d = np.array([[dtw_distance(a, b) for b in seqs] for a in seqs])
        self.sequences = {c: [] for c in self.sequences}
        return min_cut(d.max() - d, members)

    def state_dict(self):
        return {**super().state_dict(), "sequences": self.sequences}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.sequences = state["sequences"]


class GCFLClient(PersonalClient):
    """Keeps its whole model; its convolutions move only by its cluster's mean update."""

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.names = shared_names(setup.initial_params, "convs")

    def receive(self, params, message, ctx):
        if int(message.scalars.get("for_fit", 0)) != ctx.state.get("fits", 0):
            return params  # a mean for an earlier fit, which this client has moved past
        return add_flat(params, message.tensors["cluster_update"].to(params[self.names[0]].dtype),
                        self.names)

    def fit(self, message, ctx):
        start = self.current(message, ctx)
        trained, stats = self.local_train(start, ctx)
        update = delta(trained, start, self.names)
        # the convolutions go back to where the round started; the server's mean is added next
        ctx.state["params"] = {k: start[k] if k in self.names else v for k, v in trained.items()}
        ctx.state["fits"] = ctx.state.get("fits", 0) + 1
        return Message({"update": update.float()},
                       {"num_samples": ctx.data.num_samples("train"), "train_loss": stats.loss,
                        "fit": ctx.state["fits"]})


GCFL = register(Algorithm("gcfl", GCFLServer, GCFLClient, GCFLOptions, levels=("graph",),
                          description="clustered FL sharing GIN convolutions (cosine min-cut)"))
GCFL_PLUS = register(Algorithm("gcfl+", GCFLPlusServer, GCFLClient, GCFLPlusOptions,
                               levels=("graph",),
                               description="GCFL with DTW on update-norm sequences"))
