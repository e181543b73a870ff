"""AdaFGL's personalised propagation network (Li et al., ICDE 2024, step 2): a homophilous
module and a heterophilous one over the same precomputed inputs, X, the propagated features
[X, ÂX, …, Â^K X] and the binary soft-label similarity S (``graphfed.algorithms.personalized.
adafgl`` builds them from the federated knowledge extractor).

* homophilous: an MLP on the propagated features (its output is pulled towards the extractor's
  soft labels by the knowledge-preserving loss);
* heterophilous: an MLP on X alone (topology-independent), an MLP on the propagated features,
  and the learnable signed message passing H' = ((softmax(P⁺H) − softmax(P⁻H)) + H) / 2, H an
  MLP's logits on the propagated features, P± = PReLU(±R̃) from R = β·S + (1 − β)·cos(H) as
  the authors' code normalises it (``signed_operator``).

Layer sizes, initialisation (Xavier-uniform with the ReLU gain, zero biases) and activations
(PReLU, dropout after each hidden layer) follow the authors' code (``models/my_model.py``); it
shares one PReLU between some branches, here each MLP and the signed operator have their own.

Every reduction over many elements is a matrix product, in the forward pass (``grand_mean``)
and in the backward one (``spread``, outer products): the same bits whatever the CPU thread
count, where a long ``sum`` (a broadcast scalar's gradient among them) is split across threads.
"""

from __future__ import annotations

from itertools import pairwise

import torch
from torch import Tensor, nn

SCALE_EPS = 1e-9  # the smallest norm product a cosine divides by (the code's 1e-9)


def grand_mean(m: Tensor) -> Tensor:
    """The mean of every entry of the matrix ``m``, as two matrix products."""
    rows = torch.ones(1, m.shape[0], dtype=m.dtype, device=m.device)
    cols = torch.ones(m.shape[1], 1, dtype=m.dtype, device=m.device)
    return (rows @ m @ cols).view(()) / m.numel()


def spread(scalar: Tensor, like: Tensor) -> Tensor:
    """``scalar`` in every entry of a matrix shaped as ``like``, as an outer product, so that
    its gradient is a matrix product too."""
    rows = torch.ones(like.shape[0], 1, dtype=like.dtype, device=like.device)
    cols = torch.ones(1, like.shape[1], dtype=like.dtype, device=like.device)
    return rows @ scalar.view(1, 1) @ cols


def soft_label_cosines(logits: Tensor) -> Tensor:
    """cos(softmax(z_i), softmax(z_j)) for every pair of rows, the diagonal set to 0 (the
    code's ``getre_scale``)."""
    p = torch.softmax(logits, dim=1)
    g = p @ p.t()
    norms = g.diagonal().sqrt().view(-1, 1)
    cos = g / (norms @ norms.t()).clamp_min(SCALE_EPS)
    return cos * (1 - torch.eye(len(p), dtype=p.dtype, device=p.device))


def signed_operator(r: Tensor) -> Tensor:
    """R̃ + I from a non-negative similarity R as the authors' code normalises it: centred on
    its mean m, entries above it scaled by 1/(max − m) into (0, 1], entries at or below it
    mapped to −R/m (the code's expression) in [−1, 0]."""
    m = grand_mean(r)
    centred = r - spread(m, r)
    top = spread((r.max() - m).clamp_min(SCALE_EPS), r)
    signed = torch.where(centred > 0, centred / top, -r / spread(m.clamp_min(SCALE_EPS), r))
    return signed + torch.eye(len(r), dtype=r.dtype, device=r.device)


class PReLU(nn.Module):
    """PReLU with one slope a (0.25 at first, as ``nn.PReLU``): max(x, 0) − a·max(−x, 0), a
    broadcast by ``spread`` so that a's gradient is a matrix product."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([0.25]))

    def forward(self, x: Tensor) -> Tensor:
        return torch.relu(x) - spread(self.weight, x) * torch.relu(-x)


class PReLUMLP(nn.Module):
    """``layers`` linear layers, PReLU and dropout after each but the last."""

    def __init__(self, d_in: int, hidden: int, d_out: int, layers: int, dropout: float):
        super().__init__()
        dims = [d_in] + [hidden] * (layers - 1) + [d_out]
        linears = [nn.Linear(a, b) for a, b in pairwise(dims)]
        gain = nn.init.calculate_gain("relu")
        for linear in linears:
            nn.init.xavier_uniform_(linear.weight, gain=gain)
            nn.init.zeros_(linear.bias)
        self.linears = nn.ModuleList(linears)
        self.act = PReLU()
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        for linear in self.linears[:-1]:
            x = self.dropout(self.act(linear(x)))
        return self.linears[-1](x)


class AdaFGLNet(nn.Module):
    """Both propagation modules; ``forward`` returns the logits of the homophilous module and
    the heterophilous module's three (topology-independent, propagated, signed message
    passing)."""

    def __init__(self, feat_dim: int, hidden: int, num_classes: int, prop_steps: int,
                 homo_layers: int, hete_layers: int, dropout: float, beta: float):
        super().__init__()
        smoothed = (prop_steps + 1) * feat_dim
        self.beta = beta
        self.homo = PReLUMLP(smoothed, hidden, num_classes, homo_layers, dropout)
        self.local = PReLUMLP(feat_dim, hidden, num_classes, hete_layers, dropout)
        self.smooth = PReLUMLP(smoothed, hidden, num_classes, hete_layers, dropout)
        self.message = PReLUMLP(smoothed, hidden, num_classes, hete_layers, dropout)
        self.signal = PReLU()

    def signed_passing(self, h: Tensor, similarity: Tensor) -> Tensor:
        """((softmax(P⁺H) − softmax(P⁻H)) + H) / 2, P± = PReLU(±R̃), R = β·S + (1 − β)·cos(H)."""
        r = self.beta * similarity + (1 - self.beta) * soft_label_cosines(h)
        op = signed_operator(r)
        positive = torch.softmax(self.signal(op) @ h, dim=1)
        negative = torch.softmax(self.signal(-op) @ h, dim=1)
        return (positive - negative + h) / 2

    def forward(self, x: Tensor, smoothed: Tensor, similarity: Tensor
                ) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        h = self.message(smoothed)
        return (self.homo(smoothed), self.local(x), self.smooth(smoothed),
                self.signed_passing(h, similarity))
