"""Graph surgery of FedSage+: hide nodes to make NeighGen's training targets, and mend a graph
with generated neighbours."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor
from torch_geometric.data import Data

from graphfed.data.federated import SPLITS


@dataclass
class Impaired:
    """A client's graph with some nodes hidden, and what NeighGen must recover per kept node."""

    keep: Tensor  # original ids of the kept nodes, ascending
    hidden: Tensor  # original ids of the hidden nodes
    x: Tensor
    edge_index: Tensor  # among kept nodes, relabelled 0..len(keep)-1
    y: Tensor
    train: Tensor  # bool over kept nodes: labelled training nodes
    missing_count: Tensor  # float per kept node: its in-neighbours that were hidden
    missing_x: Tensor  # [kept, num_pred, F]: features of (the first num_pred of) them
    missing_mask: Tensor  # [kept, num_pred] bool: which slots of missing_x are real

    def to(self, device: torch.device | str) -> Impaired:
        return Impaired(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))


def kept_nodes(num_nodes: int, portion: float) -> int:
    """How many of a client's ``num_nodes`` nodes stay visible after hiding: NeighGen's
    training samples, which the server computes from the partition instead of asking."""
    return num_nodes - int(portion * num_nodes)


def hide_nodes(graph: Data, portion: float, num_pred: int,
               generator: torch.Generator | None = None) -> Impaired:
    """Hide ``int(portion * n)`` random nodes of ``graph`` and collect the recovery targets."""
    n = graph.num_nodes
    order = torch.randperm(n, generator=generator)
    hidden = order[:n - kept_nodes(n, portion)].sort().values
    is_hidden = torch.zeros(n, dtype=torch.bool)
    is_hidden[hidden] = True
    keep = torch.nonzero(~is_hidden).view(-1)
    new_id = torch.full((n,), -1, dtype=torch.long)
    new_id[keep] = torch.arange(len(keep))
    source, target = graph.edge_index.cpu()
    inside = ~is_hidden[source] & ~is_hidden[target]
    edge_index = new_id[graph.edge_index.cpu()[:, inside]]
    lost = is_hidden[source] & ~is_hidden[target]  # a hidden in-neighbour of a kept node
    lost_source, lost_target = source[lost], new_id[target[lost]]
    missing_count = torch.zeros(len(keep)).index_add_(0, lost_target,
                                                      torch.ones(len(lost_target)))
    x = graph.x.cpu().float()
    missing_x = torch.zeros(len(keep), num_pred, x.size(1))
    missing_mask = torch.zeros(len(keep), num_pred, dtype=torch.bool)
    if len(lost_target):
        # slot of each lost edge among its target's lost edges, ordered by source id
        key = lost_target * n + lost_source
        perm = torch.argsort(key)
        lost_source, lost_target = lost_source[perm], lost_target[perm]
        first = torch.searchsorted(lost_target, lost_target)
        slot = torch.arange(len(lost_target)) - first
        fits = slot < num_pred
        missing_x[lost_target[fits], slot[fits]] = x[lost_source[fits]]
        missing_mask[lost_target[fits], slot[fits]] = True
    train = graph.train_mask.cpu()[keep] if hasattr(graph, "train_mask") else torch.zeros(
        len(keep), dtype=torch.bool)
    return Impaired(keep, hidden, x[keep], edge_index, graph.y.cpu()[keep], train,
                    missing_count, missing_x, missing_mask)


def mend(x: Tensor, edge_index: Tensor, counts: Tensor, generated: Tensor
         ) -> tuple[Tensor, Tensor, Tensor]:
    """Append ``counts[i]`` nodes with features ``generated[i, :counts[i]]`` to each node ``i``,
    linked to it in both directions. Returns features, edges and each new node's source node;
    original nodes keep their ids. Differentiable in ``generated``."""
    n, slots = generated.shape[:2]
    use = torch.arange(slots, device=counts.device).unsqueeze(0) < counts.unsqueeze(1)
    source = torch.arange(n, device=counts.device).unsqueeze(1).expand(n, slots)[use]
    new = torch.arange(len(source), device=counts.device) + n
    edges = torch.cat([edge_index, torch.stack([new, source]), torch.stack([source, new])], 1)
    return torch.cat([x, generated[use].to(x.dtype)]), edges, source


def mended_graph(graph: Data, counts: Tensor, generated: Tensor) -> Data:
    """``graph`` with the generated neighbours appended (label -1, in no split)."""
    x, edge_index, source = mend(graph.x.float(), graph.edge_index, counts, generated)
    added = len(source)
    out = Data(x=x, edge_index=edge_index, num_nodes=graph.num_nodes + added,
               y=torch.cat([graph.y, torch.full((added,), -1, dtype=graph.y.dtype)]))
    for s in SPLITS:
        mask = getattr(graph, f"{s}_mask")
        setattr(out, f"{s}_mask", torch.cat([mask, torch.zeros(added, dtype=torch.bool)]))
    out.generated_from = source
    return out


def greedy_feature_loss(generated: Tensor, true: Tensor, mask: Tensor) -> Tensor:
    """Mean over the first ``min(num_pred, true count)`` generated slots of each node of the
    squared error (mean over features) to the closest true missing neighbour."""
    valid = mask.any(1)
    if not bool(valid.any()):
        return generated.sum() * 0.0
    g, t, m = generated[valid], true[valid].to(generated.dtype), mask[valid]
    dist = ((g * g).sum(-1, keepdim=True) + (t * t).sum(-1).unsqueeze(1)
            - 2 * torch.bmm(g, t.transpose(1, 2))).clamp_min(0) / g.size(-1)
    closest = dist.masked_fill(~m.unsqueeze(1), float("inf")).min(2).values
    return (closest * m).sum() / m.sum()
