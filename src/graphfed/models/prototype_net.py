"""A network split into a feature extractor and a linear head, for prototype-based methods
(FedProto, FedTGP): the extractor's output is the embedding whose class means are exchanged,
the head maps it to class logits (PFLlib's ``BaseHeadSplit``).

Extractor: ``layers`` message-passing layers, in -> hidden -> ... -> embedding, each after
dropout and followed by ReLU (the embedding is the last ReLU's output, as the authors' CNNs end
in fc + ReLU); at graph level the node embeddings are then pooled. Head: Linear(embedding,
classes) on the dropped-out embedding.

Clients of one federation may differ in ``hidden`` while sharing the embedding width: the
forward pass reads every width from the parameters it is given (``torch.func.functional_call``
swaps them in), so one module computes for every client whatever its size. That holds for the
layer types of ``WIDTH_FREE_LAYERS``, whose forward reads no width from the module.
"""

from __future__ import annotations

import hashlib

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch_geometric.data import Data

from graphfed.models.dropout import dropout
from graphfed.models.gnn import (
    ModelOptions,
    _prepare_edges,
    message_passing_layer,
    propagate_inputs,
)
from graphfed.models.propagation import mean_pool, sum_pool
from graphfed.tensors import Params

# layer types whose forward pass takes every width from the parameters (GAT reshapes by its
# stored head count and width; SGC and mlp_sage are other shapes)
WIDTH_FREE_LAYERS: dict[str, tuple[str, ...]] = {
    "node": ("gcn", "sage", "mlp"), "graph": ("gcn", "sage", "gin", "mlp")}


class PrototypeNet(nn.Module):
    """Extractor (message-passing layers of width ``hidden``, ending at ``embedding_dim``) and
    a linear head; ``forward(..., with_embedding=True)`` also returns the embeddings."""

    def __init__(self, level: str, in_dim: int, num_classes: int, opts: ModelOptions,
                 embedding_dim: int):
        super().__init__()
        if opts.name not in WIDTH_FREE_LAYERS[level]:
            raise ValueError(f"model={opts.name}: prototype methods run "
                             f"{', '.join(WIDTH_FREE_LAYERS[level])} at {level} level")
        self.level, self.in_dim, self.num_classes = level, in_dim, num_classes
        self.opts, self.embedding_dim = opts, embedding_dim
        dims = [in_dim] + [opts.hidden] * (opts.layers - 1) + [embedding_dim]
        self.convs = nn.ModuleList(
            message_passing_layer(opts.name, dims[i], dims[i + 1], opts, last=False)
            for i in range(opts.layers))
        self.head = nn.Linear(embedding_dim, num_classes)

    def prepare(self, graph: Data) -> Data:
        return _prepare_edges(self.opts.name, graph)

    def sized(self, hidden: int, seed: int) -> Params:
        """Initial parameters of this network with hidden width ``hidden``, drawn on the CPU
        from ``seed`` (the caller's random streams left as they were)."""
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            other = PrototypeNet(self.level, self.in_dim, self.num_classes,
                                 self.opts.model_copy(update={"hidden": hidden}),
                                 self.embedding_dim)
        return {k: v.detach() for k, v in other.named_parameters()}

    def embed(self, x: Tensor, edge_index: Tensor, edge_weight: Tensor | None) -> Tensor:
        inputs = propagate_inputs(self.opts.name, edge_index, edge_weight)
        for i, conv in enumerate(self.convs):
            x = dropout(x, self.opts.dropout, self.training, on_features=i == 0)
            x = F.relu(conv(x, *inputs))
        return x

    def forward(self, x: Tensor, edge_index: Tensor, *args: Tensor | int | None,
                with_embedding: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Node level: (x, edge_index, edge_weight); graph level: (x, edge_index, batch,
        num_graphs, edge_weight). Logits, and with ``with_embedding`` the embeddings."""
        if self.level == "node":
            (edge_weight,) = args
            h = self.embed(x, edge_index, edge_weight)  # type: ignore[arg-type]
        else:
            batch, num_graphs, edge_weight = args
            nodes = self.embed(x, edge_index, edge_weight)  # type: ignore[arg-type]
            pool = sum_pool if self.opts.pooling == "add" else mean_pool
            h = pool(nodes, batch, num_graphs)
        out = self.head(dropout(h, self.opts.dropout, self.training))
        return (out, h) if with_embedding else out


def params_seed(params: Params, salt: int) -> int:
    """A seed determined by ``params`` (their bytes, on the CPU) and ``salt``: the same in every
    process that holds the same parameters, another for another run seed's."""
    digest = hashlib.sha256(str(salt).encode())
    for name in sorted(params):
        digest.update(params[name].detach().cpu().contiguous().numpy().tobytes())
    return int.from_bytes(digest.digest()[:8], "little") & (2**63 - 1)
