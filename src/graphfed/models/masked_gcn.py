"""FED-PUB's masked GCN (Baek, Jeong, Jin, Yoon, Hwang, "Personalized subgraph federated
learning", ICML 2023; ``JinheonBaek/FED-PUB:models/nets.py`` MaskedGCN and ``models/layers.py``
MaskedGCNConv, MaskedLinear): two GCN layers and a linear classifier, each weight matrix
multiplied element-wise by a learnable mask of its shape. The weights are shared through the
server; each client keeps its own masks, which select the part of the shared weights its
subgraph uses (the paper's personalised sparse masks).

As the code: conv1 → ReLU → dropout → conv2 → ReLU → dropout → classifier (no dropout on the
input); Glorot-uniform weights, zero GCN biases, the classifier's bias uniform in
±√(6/(1 + C)) (the code's ``xavier_uniform_`` on a 1 × C bias). In eval mode a mask entry
smaller than ``prune_threshold`` in magnitude counts as 0 (the code's ``prune``, whose
threshold is its l1 coefficient); training sees the raw masks.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from graphfed.models.dropout import dropout
from graphfed.models.gnn import gcn_normalised
from graphfed.models.propagation import weighted_sum
from graphfed.tensors import Params

MaskInit = Literal["ones", "glorot"]
MASK = "mask"  # the name every mask parameter ends with
EMBEDDING_LAYER = "conv2"  # the layer whose output is the functional embedding (is_proxy)


def is_mask(name: str) -> bool:
    return name.rsplit(".", 1)[-1] == MASK


def weights_only(params: Params) -> Params:
    """``params`` without the masks: what the server shares among clients."""
    return {k: v for k, v in params.items() if not is_mask(k)}


def embedding_width(params: Params) -> int:
    """The width of the functional embedding (the output of ``EMBEDDING_LAYER``)."""
    return params[f"{EMBEDDING_LAYER}.bias"].shape[0]


class MaskedWeight(nn.Module):
    """A weight matrix W, its mask M and a bias; ``masked()`` is W ⊙ M (pruned in eval)."""

    def __init__(self, d_in: int, d_out: int, mask_init: MaskInit, prune_threshold: float):
        super().__init__()
        self.weight = nn.Parameter(nn.init.xavier_uniform_(torch.empty(d_out, d_in)))
        mask = torch.ones(d_out, d_in)
        self.mask = nn.Parameter(nn.init.xavier_uniform_(mask) if mask_init == "glorot" else mask)
        self.bias = nn.Parameter(torch.zeros(d_out))
        self.prune_threshold = prune_threshold

    def masked(self) -> Tensor:
        mask = self.mask
        if not self.training:
            mask = mask.masked_fill(mask.abs() < self.prune_threshold, 0.0)
        return self.weight * mask


class MaskedGCN(nn.Module):
    """Node classifier; ``forward(..., hidden=True)`` stops at conv2's output (pre-ReLU), the
    code's ``is_proxy`` output from which the functional embedding is taken."""

    def __init__(self, in_dim: int, hidden: int, num_classes: int, dropout_p: float,
                 mask_init: MaskInit = "ones", prune_threshold: float = 1e-3):
        super().__init__()
        self.conv1 = MaskedWeight(in_dim, hidden, mask_init, prune_threshold)
        self.conv2 = MaskedWeight(hidden, hidden, mask_init, prune_threshold)
        self.classifier = MaskedWeight(hidden, num_classes, mask_init, prune_threshold)
        bound = math.sqrt(6.0 / (1 + num_classes))
        nn.init.uniform_(self.classifier.bias, -bound, bound)
        self.dropout_p = dropout_p

    def prepare(self, graph: Data) -> Data:
        return gcn_normalised(graph)

    @staticmethod
    def _gcn(layer: MaskedWeight, x: Tensor, edge_index: Tensor, edge_weight: Tensor) -> Tensor:
        """Â X (W ⊙ M)ᵀ + b over the prepared (normalised, self-looped) edges: one sparse
        product (``weighted_sum``), which sums every row in a fixed order on any thread count."""
        out = weighted_sum(F.linear(x, layer.masked()), edge_index, edge_weight)
        return out + layer.bias

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None = None,
                hidden: bool = False) -> Tensor:
        if edge_weight is None:
            raise ValueError("MaskedGCN needs the normalised edge weights of prepare()")
        x = dropout(F.relu(self._gcn(self.conv1, x, edge_index, edge_weight)), self.dropout_p,
                    self.training)
        x = self._gcn(self.conv2, x, edge_index, edge_weight)
        if hidden:
            return x
        x = dropout(F.relu(x), self.dropout_p, self.training)
        return F.linear(x, self.classifier.masked(), self.classifier.bias)
