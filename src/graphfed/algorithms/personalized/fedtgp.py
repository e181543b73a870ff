"""FedTGP (Zhang, Liu, Hua, Cao, "FedTGP: Trainable Global Prototypes with Adaptive-Margin-
Enhanced Contrastive Learning for Data and Model Heterogeneity in Federated Learning", AAAI 2024).

The clients are FedProto's (``fedproto``): each trains its own network, of its own size, with
CE + lambda * phi(f_i(x), P^(y)) (Eq. 3) and uploads its class prototypes (Eq. 2). The server
does not average them: it learns the global prototypes P^c = F(E^c) with a trainable embedding
E (one row per class) and a two-layer network F, by S epochs of the adaptive-margin contrastive
loss over the uploaded prototypes C_i^c (Eq. 5)

    L_P = sum_{i,c} -log  e^{-(phi(C_i^c, P^c) + delta)}
                          / (e^{-(phi(C_i^c, P^c) + delta)} + sum_{c' != c} e^{-phi(C_i^c, P^c')})

with phi the Euclidean distance and the margin (Eq. 4)

    delta(t) = min( max_c min_{c' != c} ||Q_c - Q_c'||, tau ),   Q_c = mean_i C_i^c,

which grows as the clusters of this round's prototypes separate, up to tau. Every class then has
a global prototype (F is defined on every row of E), which the clients receive.

From the authors' code (``TsingZ0/FedTGP``, ``servertgp.py``): F is Linear(d, h) + ReLU, then
Linear(h, d), with h = d; E is initialised N(0, 1) and the layers as ``nn.Linear`` is; the server
trains with plain SGD at the clients' learning rate, a fresh optimizer each round, E and F kept
across rounds. The code trains on mini-batches of 10 shuffled prototypes and S = 1000 epochs;
the paper's S = 100 and the full set of the round's prototypes (OpenFGL's graph port) are the
defaults, ``server_batch_size`` and ``server_epochs`` the switches. The shuffle draws from a
generator seeded by the round and the run's initial model, so a resumed run draws the same.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from graphfed.algorithms.personalized.fedproto import (
    COUNTS,
    PROTOTYPES,
    FedProtoClient,
    FedProtoServer,
    PrototypeOptions,
    check_prototype_run,
    prototype_model,
)
from graphfed.algorithms.registry import Algorithm, RunView, register
from graphfed.messages import Message
from graphfed.models.prototype_net import params_seed
from graphfed.protocol import Setup
from graphfed.tensors import Params

GENERATOR_SALT = -1  # the seed of E and F's initialisation, beside every width's


class FedTGPOptions(PrototypeOptions):
    server_epochs: int = Field(100, ge=1, description="S, the server's epochs over the round's "
                               "prototypes (paper: 100; authors' code --server_epochs: 1000)")
    margin_threshold: float = Field(100.0, ge=0.0, description="tau, the margin's cap (Eq. 4; "
                                    "paper and code: 100)")
    server_lr: float | None = Field(None, gt=0.0, description="the server's SGD step size; "
                                    "unset: the clients' optimizer.lr (authors' code)")
    server_batch_size: int | None = Field(
        None, ge=1, description="prototypes per server step: unset, all of the round's "
        "(paper's loss, OpenFGL); the authors' code: 10, shuffled")
    server_hidden: int | None = Field(None, ge=1, description="width h of F's hidden layer; "
                                      "unset: the embedding width d (authors' code)")


def initial_generator(num_classes: int, dim: int, hidden: int, seed: int) -> Params:
    """E ~ N(0, 1) and F's two linear layers as ``nn`` initialises them, drawn from ``seed``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        parts = {"embedding": nn.Embedding(num_classes, dim), "middle": nn.Linear(dim, hidden),
                 "fc": nn.Linear(hidden, dim)}
    return {f"{name}.{k}": v.detach() for name, part in parts.items()
            for k, v in part.named_parameters()}


def generate(params: Params) -> Tensor:
    """P = F(E): every class's global prototype."""
    middle = F.relu(F.linear(params["embedding.weight"], params["middle.weight"],
                             params["middle.bias"]))
    return F.linear(middle, params["fc.weight"], params["fc.bias"])


def adaptive_margin(prototypes: Tensor, labels: Tensor, cap: float) -> float:
    """Eq. 4: the largest over classes of each class's distance to its nearest other class
    centre (the unweighted mean of its uploaded prototypes), capped at ``cap``; a class alone
    takes the smallest such distance (the authors' code)."""
    present = torch.unique(labels)
    centres = torch.stack([prototypes[labels == c].double().mean(0) for c in present])
    if len(present) < 2:
        return cap
    dist = torch.cdist(centres, centres)
    dist.fill_diagonal_(float("inf"))
    gaps = dist.min(1).values
    return min(float(gaps.max()), cap)


def contrastive_loss(uploaded: Tensor, labels: Tensor, generated: Tensor, margin: float
                     ) -> Tensor:
    """Eq. 5: cross-entropy of minus the Euclidean distances, the true class's distance
    raised by the margin; averaged over the prototypes (the authors' code; the paper sums)."""
    squared = (uploaded.unsqueeze(1) - generated.unsqueeze(0)).pow(2).sum(-1)
    dist = squared.clamp_min(1e-12).sqrt()
    dist = dist + margin * F.one_hot(labels, generated.shape[0]).to(dist.dtype)
    return F.cross_entropy(-dist, labels)


def check_fedtgp_run(config: RunView) -> None:
    """FedProto's checks, and no secure aggregation: the server trains on each upload."""
    check_prototype_run(config)
    if config.secure_aggregation.enabled:
        raise ValueError("secure_aggregation shows the server only sums of the clients' "
                         "prototypes; fedtgp's server trains its global prototypes on each "
                         "client's own (Eq. 5), so it cannot run on their sum")


class FedTGPServer(FedProtoServer):
    """Learns the global prototypes from the uploaded ones (E and F are its state)."""

    state_keys = (*FedProtoServer.state_keys, "generator")
    options: FedTGPOptions

    def __init__(self, setup: Setup):
        super().__init__(setup)
        o = self.options
        dim = self.prototypes.shape[1]
        self.generator = initial_generator(
            setup.num_classes, dim, o.server_hidden or dim,
            params_seed(setup.initial_params, GENERATOR_SALT))

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        """S epochs of Eq. 5 over the classes each reply holds, then P = F(E) for all."""
        if not replies:
            return
        o = self.options
        uploads, labels = [], []
        for c in sorted(replies):
            held = torch.nonzero(replies[c].tensors[COUNTS] > 0).view(-1)
            uploads.append(replies[c].tensors[PROTOTYPES][held])
            labels.append(held)
        uploaded, y = torch.cat(uploads), torch.cat(labels)
        if not len(y):
            return
        margin = adaptive_margin(uploaded, y, o.margin_threshold)
        self.generator = self.train_generator(rnd, uploaded, y, margin)
        with torch.no_grad():
            self.prototypes = generate(self.generator)
        self.known = torch.ones_like(self.known)

    def train_generator(self, rnd: int, uploaded: Tensor, labels: Tensor, margin: float
                        ) -> Params:
        """E and F after S epochs of SGD (a fresh optimizer, as the authors' code makes one
        every round)."""
        o = self.options
        live = {k: v.detach().clone().requires_grad_(True) for k, v in self.generator.items()}
        optimizer = torch.optim.SGD([live[k] for k in sorted(live)],
                                    lr=o.server_lr or self.setup.optimizer.lr)
        shuffle = torch.Generator().manual_seed(params_seed(self.setup.initial_params, rnd))
        n = len(labels)
        size = o.server_batch_size or n
        for _ in range(o.server_epochs):
            order = torch.randperm(n, generator=shuffle) if size < n else torch.arange(n)
            for chunk in order.split(size):
                optimizer.zero_grad(set_to_none=True)
                contrastive_loss(uploaded[chunk], labels[chunk], generate(live),
                                 margin).backward()
                optimizer.step()
        return {k: v.detach() for k, v in live.items()}


FEDTGP = register(Algorithm(
    "fedtgp", FedTGPServer, FedProtoClient, FedTGPOptions,
    family="personalized",
    paper="Zhang et al., AAAI 2024 (FedTGP)",
    levels=("node", "graph"),
    model=prototype_model,
    check=check_fedtgp_run,
    modes={"graph": ("dataset=MUTAG", "partition=dirichlet", "model=gin"),
           "two-sizes": ("fedtgp.hidden_widths=[16,32]",),
           "code-batches": ("fedtgp.server_batch_size=10", "fedtgp.server_epochs=3")},
    description="clients of any model size upload class prototypes; the server learns global "
                "prototypes with adaptive-margin contrastive learning"))
