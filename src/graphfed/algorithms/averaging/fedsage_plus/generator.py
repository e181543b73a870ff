"""Training NeighGen on an impaired graph and mending a graph with it (FedSage+ §4)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.data import Data

from graphfed.algorithms.averaging.fedsage_plus.impair import (
    Impaired,
    greedy_feature_loss,
    mend,
    mended_graph,
)
from graphfed.algorithms.averaging.fedsage_plus.options import FedSagePlusOptions
from graphfed.models.neighgen import NeighGen


def clip_counts(counts: Tensor, num_pred: int) -> Tensor:
    """Predicted counts as whole numbers of generated neighbours in ``[0, num_pred]``."""
    return counts.detach().round().clamp(0, num_pred).long()


def neighgen_loss(model: NeighGen, data: Impaired, options: FedSagePlusOptions) -> Tensor:
    counts, generated = model(data.x, data.edge_index)
    loss = options.num_weight * F.smooth_l1_loss(counts, data.missing_count)
    loss = loss + options.feat_weight * greedy_feature_loss(generated, data.missing_x,
                                                            data.missing_mask)
    if options.clf_weight > 0 and bool(data.train.any()):
        x, edge_index, _ = mend(data.x, data.edge_index, clip_counts(counts, model.num_pred),
                                generated)
        logits = model.classify(x, edge_index)[:len(data.keep)]
        loss = loss + options.clf_weight * F.cross_entropy(logits[data.train], data.y[data.train])
    return loss


def new_neighgen(in_dim: int, num_classes: int, options: FedSagePlusOptions) -> NeighGen:
    """NeighGen initialised from ``options.gen_seed`` (the same on every client)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(options.gen_seed)
        return NeighGen(in_dim, num_classes, options.gen_hidden, options.num_pred,
                        options.fgen_hidden, options.gen_dropout, options.gen_noise)


def train_neighgen(params: dict[str, Tensor] | None, data: Impaired, num_classes: int,
                   options: FedSagePlusOptions) -> tuple[dict[str, Tensor], float]:
    """``gen_local_steps`` Adam steps from ``params`` (None: a fresh NeighGen)."""
    model = new_neighgen(data.x.size(1), num_classes, options).to(data.x.device)
    if params is not None:
        model.load_state_dict(params)
    optimizer = torch.optim.Adam(model.parameters(), lr=options.gen_lr,
                                 weight_decay=options.gen_weight_decay)
    model.train()
    loss = torch.zeros(())
    for _ in range(options.gen_local_steps):
        optimizer.zero_grad(set_to_none=True)
        loss = neighgen_loss(model, data, options)
        loss.backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, float(loss.detach())


@torch.no_grad()
def mend_with(params: dict[str, Tensor], graph: Data, num_classes: int,
              options: FedSagePlusOptions) -> Data:
    """``graph`` mended by the NeighGen ``params`` (eval mode: no dropout, no noise)."""
    model = new_neighgen(graph.x.size(1), num_classes, options).to(graph.x.device)
    model.load_state_dict(params)
    model.eval()
    counts, generated = model(graph.x.float(), graph.edge_index)
    return mended_graph(graph, clip_counts(counts, options.num_pred), generated)
