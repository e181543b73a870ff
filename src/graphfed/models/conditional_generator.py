"""A class-conditional generator of node features, for data-free distillation on a server that
holds no data (FedTAD): features x = MLP([E(c) || z]) from a class label c, embedded by a
learned C×C table E, and Gaussian noise z.

The MLP's hidden widths, Tanh activations and dropout are the caller's (FedTAD's code: 64,
128, 256, Tanh, dropout 0); the output layer is linear, so features take any real value.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class ConditionalGenerator(nn.Module):
    """x = Linear(MLP([E(c) || z])): one feature row per (noise row, class label) pair."""

    def __init__(self, noise_dim: int, num_classes: int, out_dim: int,
                 hidden: tuple[int, ...], dropout: float):
        super().__init__()
        self.noise_dim = noise_dim
        self.embedding = nn.Embedding(num_classes, num_classes)
        layers: list[nn.Module] = []
        width = noise_dim + num_classes
        for h in hidden:
            layers += [nn.Linear(width, h), nn.Tanh(), nn.Dropout(dropout)]
            width = h
        self.hidden = nn.Sequential(*layers)
        self.out = nn.Linear(width, out_dim)

    def forward(self, z: Tensor, labels: Tensor) -> Tensor:
        return self.out(self.hidden(torch.cat([self.embedding(labels), z], dim=1)))
