"""The link predictor of the edge level: a node encoder and a pair decoder.

The encoder is the node classifier's layer stack (``gnn.NodeStack``: GCN, SAGE, GAT, GIN or
MLP layers under the same parameter names ``convs.<i>``), its last layer giving each node an
embedding z of width ``model.embedding`` instead of class logits. The decoder scores a pair
(u, v) with a logit:

* ``inner``: z_u · z_v, the graph auto-encoder's decoder (Kipf & Welling, "Variational Graph
  Auto-Encoders", NeurIPS workshop 2016), without parameters;
* ``hadamard_mlp``: MLP(z_u ⊙ z_v), Linear(d, hidden), ReLU, Linear(hidden, 1), its
  parameters ``decoder.0`` and ``decoder.2``.

Both are symmetric in u and v, so an undirected pair is scored once. Without a list of pairs
the ``inner`` decoder scores every ordered pair at once, Z Zᵀ (GAE's Â = σ(Z Zᵀ), Eq. 4 of the
paper), for ``edges.loss: full``.
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from graphfed.models.gnn import ModelOptions, NodeStack


class LinkPredictor(NodeStack):
    """Scores node pairs: ``forward(x, edge_index, edge_weight, pairs)`` encodes every node
    over the message-passing graph ``edge_index`` and returns one logit per column of
    ``pairs`` ([2, P]), or with ``pairs`` None (``inner`` decoder) the [N, N] logits of all."""

    def __init__(self, in_dim: int, opts: ModelOptions):
        width = opts.embedding or opts.hidden
        super().__init__(in_dim, width, opts)
        self.decoder = (None if opts.decoder == "inner" else
                        nn.Sequential(nn.Linear(width, opts.hidden), nn.ReLU(),
                                      nn.Linear(opts.hidden, 1)))

    def forward(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None,
                pairs: Tensor | None) -> Tensor:
        z = self.nodes(x, edge_index, edge_weight)
        if pairs is None:
            if self.decoder is not None:
                raise ValueError("only the inner decoder scores every node pair at once")
            return z @ z.t()
        # read through embedding: its backward sums a node's repeated rows in a fixed order,
        # where indexing's scatter sums them in thread order
        joint = F.embedding(pairs[0], z) * F.embedding(pairs[1], z)
        return joint.sum(-1) if self.decoder is None else self.decoder(joint).view(-1)
