"""The public feature encoder of FairGFL (spec ``shared/specs/fairgfl.md`` §2, App. F-B): an MLP
auto-encoder whose sigmoid bottleneck maps node features into the public domain [0, 1]^d, so the
LDP mechanisms perturb values of a known range without looking at any client's data."""

from __future__ import annotations

import torch
from torch import Tensor, nn


class FeatureAutoencoder(nn.Module):
    """``in_dim -> hidden -> code_dim`` (sigmoid) and back; one hidden layer each side."""

    def __init__(self, in_dim: int, hidden: int, code_dim: int):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(),
                                     nn.Linear(hidden, code_dim), nn.Sigmoid())
        self.decoder = nn.Sequential(nn.Linear(code_dim, hidden), nn.ReLU(),
                                     nn.Linear(hidden, in_dim))

    def encode(self, x: Tensor) -> Tensor:
        return self.encoder(x)

    def forward(self, x: Tensor) -> Tensor:
        """The reconstruction of ``x``."""
        return self.decoder(self.encoder(x))

    @torch.no_grad()
    def encoder_params(self) -> dict[str, Tensor]:
        """The encoder half, the only part the clients receive."""
        return {k: v.detach().clone() for k, v in self.encoder.state_dict().items()}
