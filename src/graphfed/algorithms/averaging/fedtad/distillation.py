"""FedTAD's server side (Section 4.2): data-free distillation of the clients' models, each
class weighted by the client's reliability ω_i^c, into the averaged global model.

Each round, after FedAvg, for E epochs (``glb_epochs``), with fresh noise z ~ N(0, I) and the
pseudo labels c (``num_gen`` nodes, the classes in equal shares):

* the generator G builds a pseudo graph: features X̂ = G(z, c), edges joining each node to its
  k most cosine-similar nodes (itself included), made symmetric;
* generator steps (``it_g``), the teachers f_i (the clients' models) and the student f_g (the
  global model) in evaluation mode, minimise
  L_G = λ1·Σ_i Σ_c ω_i^c CE(f_i(X̂)_c, c) − Σ_i Σ_c ω_i^c ‖f_g(X̂)_c − f_i(X̂)_c‖₁ + λ2·L_div:
  pseudo nodes each reliable teacher labels as their class, where student and teachers still
  disagree (the adversarial term), spread out as their noise is (the code's diversity loss
  L_div = exp(−mean_{jl} ‖z_j − z_l‖²·‖x̂_j − x̂_l‖₁), both norms per-dimension means);
* student steps (``it_d``) on the fixed pseudo graph, the student in training mode, minimise
  L_D = Σ_i Σ_c ω_i^c ‖f_g(X̂)_c − f_i(X̂)_c‖₁, the logits' mean absolute difference over the
  class's pseudo nodes.

As the authors' code does: both Adams keep their moments across rounds; the teachers' logits
take no gradient in L_D or L_G's adversarial term, but do carry L_G's cross-entropy back to
the generator; the pseudo graph's edges are a function of the features that takes no gradient.
The code sums L_div once per client over the same z and X̂, which is the number of replying
clients times one L_div: computed so here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call
from torch_geometric.data import Data

from graphfed.models.conditional_generator import ConditionalGenerator
from graphfed.tensors import Params


def pseudo_labels(num_gen: int, num_classes: int, device: torch.device) -> Tensor:
    """c: ``num_gen`` labels in class order, ⌊num_gen / C⌋ per class, the rest to the last."""
    share = num_gen // num_classes
    counts = torch.full((num_classes,), share, dtype=torch.long)
    counts[-1] += num_gen - share * num_classes
    return torch.repeat_interleave(torch.arange(num_classes), counts).to(device)


def knn_edges(features: Tensor, k: int) -> Tensor:
    """The pseudo graph's edges: (j, l) where l is among j's k most cosine-similar rows of
    ``features`` (j itself, similarity 1, among them) or j among l's, and every self-loop;
    sorted by (target, source)."""
    n = features.shape[0]
    unit = F.normalize(features.detach(), dim=1)
    nearest = (unit @ unit.T).topk(min(k, n), dim=1).indices
    adjacency = torch.zeros(n, n, dtype=torch.bool, device=features.device)
    adjacency[torch.arange(n, device=features.device)[:, None], nearest] = True
    adjacency |= adjacency.T.clone()
    adjacency.fill_diagonal_(True)
    target, source = torch.nonzero(adjacency, as_tuple=True)
    return torch.stack([source, target])


def diversity_loss(z: Tensor, features: Tensor) -> Tensor:
    """exp(−mean_{jl} d_z(j, l)·d_x(j, l)): d_z the mean squared difference of the noise rows,
    d_x the mean absolute difference of the feature rows (the code's ``DiversityLoss('l1')``)."""
    noise = (z[None, :, :] - z[:, None, :]).pow(2).mean(dim=2)
    spread = (features[None, :, :] - features[:, None, :]).abs().mean(dim=2)
    return torch.exp(-(noise * spread).mean())


def class_weighted(per_node: Tensor, labels: Tensor, weights: Tensor) -> Tensor:
    """Σ_c weights_c · mean over the pseudo nodes of class c of ``per_node``."""
    counts = torch.bincount(labels, minlength=len(weights)).to(per_node.dtype)
    sums = F.one_hot(labels, len(weights)).to(per_node.dtype).T @ per_node
    present = counts > 0
    return (weights[present] * sums[present] / counts[present]).sum()


@dataclass
class PseudoGraph:
    """The generator's graph for one epoch: its features, labels, and what the network reads
    of it (``prepare``: features and edges as the layer type takes them)."""

    features: Tensor
    x: Tensor
    labels: Tensor
    edge_index: Tensor
    edge_weight: Tensor | None


class Distiller:
    """Runs the run's network under given parameters on a pseudo graph (``prepare`` makes
    the edges what the layer type reads: GCN's normalised weights)."""

    def __init__(self, network: nn.Module, generator: ConditionalGenerator):
        self.network, self.generator = network, generator

    def graph(self, generator: Params, z: Tensor, labels: Tensor, k: int) -> PseudoGraph:
        x = functional_call(self.generator, generator, (z, labels))
        data = Data(x=x, edge_index=knn_edges(x, k), num_nodes=len(labels))
        prepared = cast(Any, self.network).prepare(data)
        return PseudoGraph(x, prepared.x, labels, prepared.edge_index,
                           getattr(prepared, "edge_weight", None))

    def logits(self, params: Params, graph: PseudoGraph, training: bool) -> Tensor:
        self.network.train(training)
        out: Tensor = functional_call(self.network, params,
                                      (graph.x, graph.edge_index, graph.edge_weight))
        return out

    def disagreement(self, student: Tensor, teachers: list[Tensor], omega: Tensor,
                     labels: Tensor) -> Tensor:
        """Σ_i Σ_c ω_i^c · mean over class c's pseudo nodes and the logits of |f_g − f_i|."""
        total = student.new_zeros(())
        for i, teacher in enumerate(teachers):
            gap = (student - teacher).abs().mean(dim=1)
            total = total + class_weighted(gap, labels, omega[i])
        return total

    def semantic(self, teachers: list[Tensor], omega: Tensor, labels: Tensor) -> Tensor:
        """Σ_i Σ_c ω_i^c · CE(f_i(X̂)_c, c), each class's cross-entropy a mean over its nodes."""
        total = teachers[0].new_zeros(())
        for i, teacher in enumerate(teachers):
            ce = F.cross_entropy(teacher, labels, reduction="none")
            total = total + class_weighted(ce, labels, omega[i])
        return total
