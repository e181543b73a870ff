"""FedEgo (Zhang et al., ACM TKDD 2023): personalised node classification with ego-graphs.

Each client model has reduction layers Θ (a linear map, averaged by FedAvg) and personalisation
layers Φ (two SAGE layers and a classifier) that read fixed-shape 2-hop ego-graphs. After local
training a client turns every mini-batch of its training nodes into one *mashed* ego-graph (the
batch's aligned ego-graphs averaged: embeddings and one-hot labels, Mixup) and uploads them with
Θ_i. The server averages Θ, trains a global Φ_g on the union of the mashed graphs (soft labels),
and each client mixes Φ_i ← λ_i Φ_g + (1 − λ_i) Φ_i with λ_i = (EMD(P_i, P_g) / 2)^γ, where P
are label distributions. Spec: ``shared/specs/fedego.md``.
"""

from __future__ import annotations

import weakref
from typing import Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor
from torch.func import functional_call

from graphfed.algorithms.base import (
    Algorithm,
    AlgorithmOptions,
    ClientContext,
    Message,
    MessageError,
    Server,
    Setup,
    register,
)
from graphfed.algorithms.personal import PersonalClient
from graphfed.algorithms.updates import under_prefix, with_prefix
from graphfed.data.sampling import NeighbourSampler
from graphfed.models.ego import (
    FedEgoNet,
    PersonalLayers,
    PersonalMLP,
    batched_tree_edges,
    mash,
    tree_size,
)
from graphfed.training import Params, Trainer
from graphfed.training.batches import PreparedNodeClient
from graphfed.training.trainer import OptimizerOptions

REDUCTION, PERSONAL = "reduction.", "personal."


class FedEgoOptions(AlgorithmOptions):
    hops: int = Field(2, ge=1, description="ego-graph depth k")
    fanout: int = Field(6, ge=1, description="neighbours sampled per node and hop (replacement)")
    ego: bool = Field(True, description="ego-graph personalisation layers; false: FedEgo w/o "
                      "EGO (SAGE reduction layers, MLP personalisation, centre uploads)")
    mixup: bool = Field(True, description="upload the batch mean of aligned ego-graphs; false: "
                        "the batch's first ego-graph (FedEgo w/o Mixup)")
    linear: bool = Field(False, description="no activation between the SAGE layers "
                         "(FedEgo-Linear)")
    average_reduction: bool = Field(True, description="average Θ (false: FedEgo w/o RL)")
    lambda_mode: Literal["adaptive", "fixed"] = "adaptive"
    lambda_value: float = Field(0.5, ge=0.0, le=1.0, description="λ when lambda_mode=fixed "
                                "(0: w/o PL, 1: FedEgo-Server)")
    gamma: float = Field(0.5, gt=0.0, description="λ_i = (EMD_i / 2)^γ")
    noise_sigma: float = Field(0.0, ge=0.0, description="Gaussian noise std added to uploaded "
                               "mashed embeddings")
    server_epochs: int = Field(5, ge=0)
    server_fraction: float = Field(0.2, gt=0.0, le=1.0, description="share of mashed centres "
                                   "each server epoch trains on")
    server_lr: float = Field(3e-4, gt=0.0)
    server_resample: bool = Field(False, description="resample each mashed tree's children with "
                                  "replacement on the server, as FedEgo's code does")
    eval_sampling: Literal["sampled", "full"] = Field(
        "sampled", description="evaluate on sampled ego-graphs (code) or the full neighbourhood")


def build_fedego_net(level: str, in_dim: int, num_classes: int, opts, options: FedEgoOptions):
    if level != "node":
        raise ValueError("FedEgo is a node-classification method")
    return FedEgoNet(in_dim, opts.hidden, num_classes, opts.dropout, options.linear,
                     options.fanout, options.ego)


def split_params(params: Params) -> tuple[Params, Params]:
    """(Θ, Φ): the reduction layers and the personalisation layers, names without prefix."""
    return under_prefix(params, REDUCTION), under_prefix(params, PERSONAL)


def join_params(theta: Params, phi: Params) -> Params:
    return {**with_prefix(theta, REDUCTION), **with_prefix(phi, PERSONAL)}


def mixing_weight(own: Tensor, global_: Tensor, options: FedEgoOptions) -> float:
    """λ_i = (EMD_i / 2)^γ with EMD_i = Σ_c |P_i(c) − P_g(c)| ∈ [0, 2], or the fixed λ."""
    if options.lambda_mode == "fixed":
        return options.lambda_value
    emd = float((own.double() - global_.double()).abs().sum())
    return min(max(emd / 2.0, 0.0), 1.0) ** options.gamma


class TreeBatch:
    """A batch of ego-trees; the loss is taken at the centres. ``x`` is either the trees'
    embeddings (trees, size, h) or distinct raw node features that ``positions`` index."""

    def __init__(self, x: Tensor, targets: Tensor, positions: Tensor | None = None):
        self.x, self.targets, self.positions = x, targets, positions

    def forward(self, model, call) -> Tensor:
        kwargs = {} if self.positions is None else {"positions": self.positions}
        return call(model, (self.x, None, None), kwargs)


class EgoView:
    """A client's graph seen through sampled ego-trees; it offers the ``batches``/``outputs``
    interface of a prepared client, so the ordinary ``Trainer`` trains and evaluates on it."""

    def __init__(self, data: PreparedNodeClient, options: FedEgoOptions):
        self.data, self.options = data, options
        self.sampler = NeighbourSampler(data.edge_index, len(data.y))
        self.size = tree_size(options.hops, options.fanout)

    def num_samples(self, split: str) -> int:
        return self.data.num_samples(split)

    def labels(self, split: str) -> Tensor:
        return self.data.labels(split)

    def trees(self, centres: Tensor, targets: Tensor) -> TreeBatch:
        distinct, positions = self.sample(centres).unique(return_inverse=True)
        return TreeBatch(self.data.x[distinct], targets, positions)

    def sample(self, centres: Tensor) -> Tensor:
        """Aligned ego-trees of FedEgo's shape around ``centres``, (len(centres), size)."""
        return self.sampler.sample(centres, self.options.hops, self.options.fanout)

    def batches(self, split: str, batch_size: int | None, shuffle: bool):
        index = self.data.epoch_nodes(split, batch_size, shuffle)
        for chunk in index.split(batch_size or max(len(index), 1)):
            yield self.trees(chunk, self.data.y[chunk])

    def outputs(self, model, call, splits) -> dict[str, tuple[Tensor, Tensor]]:
        if self.options.eval_sampling == "full":
            return self.data.outputs(model, call, splits)
        out = {}
        for s in splits:
            index = self.data.index[s]
            if len(index):
                out[s] = (self.trees(index, self.data.y[index]).forward(model, call),
                          self.data.y[index])
        return out


_VIEWS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def ego_view(data: PreparedNodeClient, options: FedEgoOptions) -> EgoView:
    """One sampler per client graph (its CSR depends on the graph only), built on first use."""
    view = _VIEWS.get(data)
    if view is None or view.options != options:
        view = _VIEWS[data] = EgoView(data, options)
    return view


@torch.no_grad()
def mashed_ego_graphs(view: EgoView, model, theta: Params, num_classes: int, batch_size: int,
                      options: FedEgoOptions) -> tuple[Tensor, Tensor]:
    """The upload: one mashed ego-graph per batch of training centres, (M, size, h) embeddings
    and (M, size, C) soft labels, from the post-training Θ_i in eval mode."""
    data = view.data
    if options.ego:  # every node's reduced embedding, read at each tree position
        reduced = F.relu(functional_call(model.reduction, theta, (data.x,)))
    index = data.index["train"]
    index = index[torch.randperm(len(index), device=index.device)]
    embeddings, labels = [], []
    for chunk in index.split(batch_size):
        nodes = view.sample(chunk)  # (b, size), aligned by position
        if options.ego:
            values, onehot = reduced[nodes], F.one_hot(data.y[nodes], num_classes).float()
        else:  # w/o EGO: the centres' embeddings from the SAGE reduction, no structure
            values = functional_call(model.reduction, theta, (data.x[nodes],)).unsqueeze(1)
            onehot = F.one_hot(data.y[chunk], num_classes).float().unsqueeze(1)
        if options.mixup:
            embeddings.append(mash(values))
            labels.append(mash(onehot))
        else:
            embeddings.append(values[0])
            labels.append(onehot[0])
    x, y = torch.stack(embeddings), torch.stack(labels)
    if options.noise_sigma > 0:
        x = x + options.noise_sigma * torch.randn_like(x)
    return x, y


def label_distribution(y: Tensor, num_classes: int) -> Tensor:
    return torch.bincount(y, minlength=num_classes).float() / max(len(y), 1)


class MashedData:
    """The server's training set of one round: every uploaded mashed ego-graph, each its own
    block; an epoch trains on a random ``fraction`` of the centres."""

    def __init__(self, x: Tensor, y: Tensor, options: FedEgoOptions):
        self.x, self.y, self.options = x, y, options
        self.size = x.shape[1]

    def batches(self, split: str, batch_size: int | None, shuffle: bool):
        count = len(self.x)
        keep = max(1, int(count * self.options.server_fraction))
        chosen = torch.randperm(count, device=self.x.device)[:keep]
        for chunk in chosen.split(batch_size or len(chosen)):
            trees = self.x[chunk]
            if self.options.server_resample:
                rows = torch.arange(len(chunk), device=trees.device).unsqueeze(1)
                trees = trees[rows, resampled_positions(len(chunk), self.options, trees.device)]
            yield TreeBatch(trees, self.y[chunk, 0])


def resampled_positions(num_trees: int, options: FedEgoOptions, device=None) -> Tensor:
    """FedEgo's code re-samples a mashed tree on the server (``fanout`` children drawn with
    replacement among the ``fanout`` children, level by level): position j of the new tree
    reads position ``orig[j]`` of the uploaded one."""
    f = options.fanout
    levels = [torch.zeros(num_trees, 1, dtype=torch.long, device=device)]
    for _ in range(options.hops):
        parents = levels[-1].repeat_interleave(f, dim=1)
        draw = torch.randint(0, f, parents.shape, device=device)
        levels.append(f * parents + 1 + draw)
    return torch.cat(levels, dim=1)


def server_graph(uploads: dict[int, Tensor], hops: int, fanout: int
                 ) -> tuple[Tensor, Tensor, Tensor]:
    """The server's union of mashed graphs as one graph: node features, edges with every client's
    trees offset into its own node range, and each node's owner (for checks and accounting)."""
    clients = sorted(uploads)
    x = torch.cat([uploads[c].reshape(-1, uploads[c].shape[-1]) for c in clients])
    counts = [len(uploads[c]) for c in clients]
    edges = batched_tree_edges(sum(counts), hops, fanout, x.device)
    size = tree_size(hops, fanout)
    owner = torch.repeat_interleave(torch.tensor(clients, device=x.device),
                                    torch.tensor(counts, device=x.device) * size)
    return x, edges, owner


class FedEgoServer(Server):
    """Averages Θ, trains Φ_g on the round's mashed ego-graphs, publishes P_g."""

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.options: FedEgoOptions = setup.options
        theta, phi = split_params(setup.initial_params)
        self.theta = {k: v.clone() for k, v in theta.items()}
        self.phi = {k: v.clone() for k, v in phi.items()}
        hidden = self.phi["classifier.weight"].shape[1]
        o = self.options
        self.size = tree_size(o.hops, o.fanout) if o.ego else 1
        layers = len({k.split(".")[1] for k in self.phi if k.startswith("convs.")})
        module = (PersonalLayers(hidden, setup.num_classes, layers, linear=o.linear,
                                 fanout=o.fanout) if o.ego
                  else PersonalMLP(hidden, setup.num_classes))
        module = module.to(self.phi["classifier.weight"].device)
        self.trainer = Trainer(module, OptimizerOptions(lr=self.options.server_lr,
                                                        weight_decay=0.0, persistent=True),
                               setup.num_classes)
        self.memory: dict = {}  # the server optimizer's state persists across rounds
        self.distribution: Tensor | None = None
        self.last: dict = {}

    def _message(self) -> Message:
        tensors = with_prefix(self.theta, REDUCTION)
        scalars = {}
        if self.distribution is not None:
            tensors.update(with_prefix(self.phi, PERSONAL))
            tensors["label_distribution"] = self.distribution
            scalars["mix"] = 1
        return Message(tensors, scalars)

    def configure_fit(self, rnd, clients):
        message = self._message()
        return {c: message for c in clients}

    configure_evaluate = configure_fit

    def reply_spec(self, client):
        hidden = self.phi["classifier.weight"].shape[1]
        spec = {REDUCTION + k: (tuple(v.shape), v.dtype) for k, v in self.theta.items()}
        spec["mashed_x"] = ((-1, self.size, hidden), torch.float32)
        spec["mashed_y"] = ((-1, self.size, self.setup.num_classes), torch.float32)
        return spec, ("num_samples",)

    def check_reply(self, client, message):
        sums = message.tensors["mashed_y"].sum(-1)
        if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
            raise MessageError(f"client {client}: mashed soft labels do not sum to 1")

    def aggregate_fit(self, rnd, replies):
        if not replies:
            return
        theta = [split_params(m.tensors)[0] for m in replies.values()]
        self.theta = {k: torch.stack([t[k] for t in theta]).mean(0) for k in self.theta}
        x = torch.cat([m.tensors["mashed_x"] for m in replies.values()])
        y = torch.cat([m.tensors["mashed_y"] for m in replies.values()])
        self.distribution = y.reshape(-1, y.shape[-1]).mean(0)
        loss = None
        if self.options.server_epochs:
            self.phi, stats = self.trainer.train(self.phi, MashedData(x, y, self.options),
                                                 self.options.server_epochs,
                                                 self.setup.batch_size or 32, memory=self.memory)
            loss = stats.loss
        ego = sum(m.tensors["mashed_x"].nbytes + m.tensors["mashed_y"].nbytes
                  for m in replies.values())
        self.last = {"mashed_graphs": len(x), "upload_ego_bytes": ego, "server_loss": loss}

    def round_metrics(self):
        return dict(self.last)

    def state_dict(self):
        return {"theta": self.theta, "phi": self.phi, "distribution": self.distribution,
                "memory": self.memory}

    def load_state_dict(self, state):
        self.theta, self.phi = state["theta"], state["phi"]
        self.distribution, self.memory = state["distribution"], state["memory"]


class FedEgoClient(PersonalClient):
    """Keeps its full model; takes Θ_g and mixes in Φ_g by its own λ_i (P_i never leaves)."""

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        theta, phi = split_params(params)
        sent_theta, sent_phi = split_params(message.tensors)
        if self.options.average_reduction and sent_theta:
            theta = sent_theta
        if message.scalars.get("mix"):
            own = label_distribution(ctx.data.y, self.setup.num_classes)
            lam = mixing_weight(own, message.tensors["label_distribution"], self.options)
            phi = {k: lam * sent_phi[k] + (1 - lam) * v for k, v in phi.items()}
        return join_params(theta, phi)

    def fit(self, message, ctx):
        view = ego_view(ctx.data, self.options)
        params, stats = ctx.trainer.train(self.current(message, ctx), view,
                                          self.setup.local_epochs, self.setup.batch_size,
                                          memory=ctx.state)
        ctx.state["params"] = params
        theta, _ = split_params(params)
        x, y = mashed_ego_graphs(view, ctx.trainer.model, theta, self.setup.num_classes,
                                 self.setup.batch_size or 32, self.options)
        tensors = with_prefix(theta, REDUCTION)
        tensors.update(mashed_x=x, mashed_y=y)
        return Message(tensors, {"num_samples": ctx.data.num_samples("train"),
                                 "train_loss": stats.loss})

    def evaluate(self, message, ctx):
        params = self.current(message, ctx)
        metrics = ctx.trainer.evaluate(params, ego_view(ctx.data, self.options))
        if ctx.global_test is not None:
            metrics["global"] = ctx.trainer.evaluate(
                params, ego_view(ctx.global_test, self.options), ("test",))["test"]
        return metrics


FEDEGO = register(Algorithm("fedego", FedEgoServer, FedEgoClient, FedEgoOptions,
                            levels=("node",), model=build_fedego_net,
                            description="ego-graph Mixup uploads, averaged reduction layers, "
                                        "server-trained SAGE mixed in by label-distribution EMD"))
