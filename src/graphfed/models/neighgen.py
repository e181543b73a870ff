"""NeighGen (FedSage+, Zhang et al. NeurIPS 2021 §4): a generator of a node's missing neighbours
(how many, dGen, and their features, fGen) over a GraphSAGE encoder, with the SAGE classifier
that FederatedScope trains on the generator-mended graph."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.nn import SAGEConv


class NeighGen(nn.Module):
    """Encoder (2 SAGE layers), dGen (count), fGen (features), and a SAGE classifier that is
    trained on the generator-mended impaired graph."""

    def __init__(self, in_dim: int, num_classes: int, hidden: int, num_pred: int,
                 fgen_hidden: list[int], dropout: float, noise: float):
        super().__init__()
        h = hidden
        self.num_pred, self.dropout, self.noise = num_pred, dropout, noise
        self.encoder = nn.ModuleList([SAGEConv(in_dim, h), SAGEConv(h, h)])
        self.dgen = nn.Linear(h, 1)
        dims = [h, *fgen_hidden, num_pred * in_dim]
        self.fgen = nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(len(dims) - 1))
        self.classifier = nn.ModuleList([SAGEConv(in_dim, h), SAGEConv(h, num_classes)])

    def forward(self, x: Tensor, edge_index: Tensor) -> tuple[Tensor, Tensor]:
        """Predicted missing counts [n] (>= 0) and generated features [n, num_pred, F]."""
        z = x
        for i, conv in enumerate(self.encoder):
            z = conv(F.dropout(z, self.dropout, self.training), edge_index)
            if i == 0:
                z = F.relu(z)
        counts = F.relu(self.dgen(z)).view(-1)
        if self.training and self.noise > 0:
            z = z + self.noise * torch.randn_like(z)
        f = z
        for i, layer in enumerate(self.fgen):
            if i == len(self.fgen) - 1:
                f = F.dropout(f, self.dropout, self.training)
            f = layer(f)
            f = torch.tanh(f) if i == len(self.fgen) - 1 else F.relu(f)
        return counts, f.view(len(x), self.num_pred, x.size(1))

    def classify(self, x: Tensor, edge_index: Tensor) -> Tensor:
        h = F.relu(self.classifier[0](F.dropout(x, self.dropout, self.training), edge_index))
        return self.classifier[1](F.dropout(h, self.dropout, self.training), edge_index)
