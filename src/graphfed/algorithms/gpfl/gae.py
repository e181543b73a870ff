"""GPFL's server-side graph auto-encoder (Eqs. 5-7), retrained from scratch every round.

Encoder: two dense graph convolutions GCN(X, A) = A X W + b (no self-loops or normalisation
beyond A's own) with LayerNorm and ReLU between, in -> hidden -> hidden // 4; decoder Z Zᵀ
(``clientgraph/model.py:GAE_dense``). Loss (Eq. 7, ``clientgraph/loss.py``): the mean entropy of
the edge probabilities a = sigmoid(Z Zᵀ) plus lambda times the mean of -log(1 - a + 1e-6),
which pushes edges to be certain and few (Ying et al., 2019).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

EPS = 1e-6


class DenseGCN(nn.Module):
    """A X W + b on a dense adjacency, initialised U(-1/sqrt(out), 1/sqrt(out)) as the code."""

    def __init__(self, d_in: int, d_out: int):
        super().__init__()
        bound = 1.0 / math.sqrt(d_out)
        self.weight = nn.Parameter(torch.empty(d_in, d_out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(d_out).uniform_(-bound, bound))

    def forward(self, x: Tensor, adjacency: Tensor) -> Tensor:
        return adjacency @ (x @ self.weight) + self.bias


class DenseGAE(nn.Module):
    """Eq. 5's GNN_server: node features and an input network -> the scores Z Zᵀ."""

    def __init__(self, d_in: int, hidden: int):
        super().__init__()
        self.first = DenseGCN(d_in, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.second = DenseGCN(hidden, hidden // 4)

    def forward(self, x: Tensor, adjacency: Tensor) -> Tensor:
        z = self.second(torch.relu(self.norm(self.first(x, adjacency))), adjacency)
        return z @ z.t()


def gae_loss(scores: Tensor, sparsity_weight: float) -> Tensor:
    """Eq. 7 on a = sigmoid(scores): mean entropy H(a) + lambda mean(-log(1 - a + 1e-6))."""
    a = torch.sigmoid(scores)
    entropy = -a * torch.log(a + EPS) - (1 - a) * torch.log(1 - a + EPS)
    return entropy.mean() + sparsity_weight * (-torch.log(1 + EPS - a)).mean()


@dataclass
class Learned:
    scores: Tensor  # Z Zᵀ of the trained GAE (eval pass, no gradient)
    losses: list[float]  # Eq. 7 at every epoch, before its step


def learn_scores(features: Tensor, adjacency: Tensor, hidden: int, epochs: int, lr: float,
                 weight_decay: float, sparsity_weight: float) -> Learned:
    """Train a fresh GAE (initialised from the global RNG, which the runtime seeds from the run
    seed and round) with Adam for ``epochs`` full-batch steps; return its scores."""
    x, a = features.float(), adjacency.float()
    model = DenseGAE(x.shape[1], hidden)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, weight_decay=weight_decay)
    losses = []
    for _ in range(epochs):
        loss = gae_loss(model(x, a), sparsity_weight)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        return Learned(model(x, a), losses)
