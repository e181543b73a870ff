"""Each client's loss on its batch of one step, every client's in one stacked pass: padded
(``training.padded``: node and graph batches, scored node pairs) or, for graph-level clients
on the CPU, joined (``training.joined``) in passes of about ``PASS_ROWS`` nodes."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from graphfed.regression import row_losses
from graphfed.tensors import Params
from graphfed.training.batches import EdgeBatch, GraphBatch, NodeBatch
from graphfed.training.joined import join_clients, joined_forward
from graphfed.training.padded import (
    EdgeLayout,
    NodeLayout,
    graph_inputs,
    stacked_forward,
)

# node rows one joined forward and backward pass holds, so that a step's activations stay
# bounded however many clients train together. On the 2-core CPU the fewer the passes the
# better (benchmarks/joined_pass.py, PROTEINS' ten clients, 15k nodes a step: a round 1.07x
# the centralized epoch at this budget, which is one pass there, 1.14x at 4,096 rows)
PASS_ROWS = 16384


def node_losses(model: nn.Module, live: Params, keys: Tensor, step: int, layout: NodeLayout,
                chosen: list[NodeBatch | None], whole: bool) -> tuple[Tensor, Tensor]:
    """Each client's mean loss on its batch of this step ``[K]`` and the batch's size."""
    positions, targets, mask = layout.targets(chosen, whole)
    logits = stacked_forward(model, live, keys, step, layout.inputs(),
                             feature_nonzeros=layout.feature_nonzeros)
    return _masked_mean_losses(
        logits.gather(1, positions.unsqueeze(-1).expand(-1, -1, logits.size(-1))), targets, mask)


def pair_losses(model: nn.Module, live: Params, keys: Tensor, step: int, layout: EdgeLayout,
                chosen: list[EdgeBatch | None]) -> tuple[Tensor, Tensor]:
    """``node_losses`` for scored node pairs: each client's encoder over its own training
    graph, its decoder on its own pairs, the binary cross-entropy averaged over its real pairs
    (``regression.mean_loss``'s, pair by pair)."""
    pairs, edges, mask = layout.pairs(chosen)
    logits = stacked_forward(model, live, keys, step, (*layout.inputs(), pairs),
                             feature_nonzeros=layout.feature_nonzeros)
    losses = F.binary_cross_entropy_with_logits(logits, edges.to(logits.dtype),
                                                reduction="none")
    counts = mask.sum(1)
    return (losses * mask).sum(1) / counts.clamp(min=1), counts


def graph_losses(model: nn.Module, live: Params, keys: Tensor, step: int,
                 chosen: list[GraphBatch | None], joined: bool = False
                 ) -> tuple[Tensor, Tensor]:
    """``node_losses`` for mini-batches of graphs: joined where asked and a row count names
    its layout (``joined.join_clients``), else padded."""
    joined_batch = join_clients(chosen) if joined else None
    if joined_batch is None:
        features = next(b for b in chosen if b is not None).x.size(1)
        inputs, targets, mask = graph_inputs(chosen, keys.device, features)
        logits = stacked_forward(model, live, keys, step, inputs)
        return _masked_mean_losses(logits[:, :targets.size(1)], targets, mask)
    owner = joined_batch.graphs.owner
    losses = row_losses(joined_forward(model, live, joined_batch, keys, step),
                        joined_batch.labels)
    counts = torch.bincount(owner, minlength=len(chosen))
    return losses.new_zeros(len(chosen)).index_add(0, owner, losses) / counts.clamp(min=1), counts


def joined_backward(model: nn.Module, live: Params, keys: Tensor, step: int,
                    chosen: list[GraphBatch | None], weight: Tensor | None
                    ) -> tuple[Tensor, Tensor]:
    """``graph_losses`` in the joined layout, their gradients (times ``weight``, None for 1)
    accumulated in the stacks: the clients in passes of about ``PASS_ROWS`` nodes
    (``client_passes``), each a forward and a backward pass. The clients' losses are
    independent, so the passes add up to one pass's gradients."""
    losses, counts = [], []
    for a, b in client_passes([0 if c is None else len(c.x) for c in chosen], PASS_ROWS):
        if all(c is None for c in chosen[a:b]):
            losses.append(torch.zeros(b - a, device=keys.device))
            counts.append(torch.zeros(b - a, dtype=torch.long, device=keys.device))
            continue
        loss, count = graph_losses(model, {n: v[a:b] for n, v in live.items()}, keys[a:b],
                                   step, chosen[a:b], joined=True)
        (loss if weight is None else loss * weight[a:b]).sum().backward()
        losses.append(loss.detach())
        counts.append(count)
    return torch.cat(losses), torch.cat(counts)


def client_passes(rows: list[int], budget: int) -> list[tuple[int, int]]:
    """Consecutive clients ``[a, b)``, each run closed once it holds ``budget`` rows (so
    under ``2 * budget`` but for one larger client: as few passes as the rows need), covering
    every client once, in order."""
    passes, start, held = [], 0, 0
    for k, n in enumerate(rows):
        held += n
        if held >= budget:
            passes.append((start, k + 1))
            start, held = k + 1, 0
    if start < len(rows) or not passes:
        passes.append((start, len(rows)))
    return passes


def _masked_mean_losses(logits: Tensor, targets: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Per client (padded ``[K, n, C]`` logits) the mean loss over its real rows, and their
    count."""
    counts = mask.sum(1)
    losses = row_losses(logits.reshape(-1, logits.size(-1)), targets.reshape(-1)
                        ).view_as(targets)
    return (losses * mask).sum(1) / counts.clamp(min=1), counts
