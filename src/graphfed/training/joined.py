"""Many clients' graph mini-batches joined end to end, each row through its own client's
parameters: the batched engine's unpadded layout for graph-level clients on the CPU.

The padded layout (``padded.graph_inputs`` under ``vmap``) pads every client's step to the
largest one beside it: on PROTEINS' ten Dirichlet clients a quarter more rows, and the groups of
similar size that bound the padding split a round into five steps where one would do. Here the
clients' batches are concatenated as PyG batches graphs: message passing and pooling run once
on the joined block-diagonal graph, element-wise operations on the joined rows, and every
linear layer is one grouped matrix product (``F.grouped_mm``: each client's rows against its
own weight). ``StackedParam`` routes the stacked parameters (``[K, ...]``) through the model's
own code; a client's dropout masks are the padded layout's bit for bit
(``dropout.keyed_keep_rows``), so the two layouts differ in float summation order only.

On CUDA, float32 ``grouped_mm`` runs one product per group after copying the offsets to the
host (PyTorch's fallback outside bf16 on sm90), so there the padded layout stays.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from graphfed.models.dropout import keyed
from graphfed.models.rows import Rows
from graphfed.tensors import Params
from graphfed.training import plans
from graphfed.training.batches import GraphBatch, GraphInputs

# the graph-level backbones whose parameters meet the data only in linear maps and bias
# additions (GAT's attention vectors multiply per-head features: it keeps the padded layout)
JOINED_MODELS = ("gin", "gcn", "sage", "mlp")
# bytes every stride of a grouped product's operands must be a multiple of
GROUPED_ALIGNMENT = 16
# element-wise operations in which a stacked bias may meet joined rows
_ELEMENTWISE = {torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__, torch.add}


def joins(model: nn.Module, device: torch.device) -> bool:
    """Whether graph-level clients of ``model`` train in the joined layout on ``device``: where
    the device's plan joins them and this torch's grouped product runs there (else they train
    padded)."""
    opts = getattr(model, "opts", None)
    return (plans.for_device(device).joined and opts is not None
            and opts.name in JOINED_MODELS and grouped_products_run(device))


@functools.cache
def grouped_products_run(device: torch.device) -> bool:
    """Whether this torch has ``F.grouped_mm`` and it multiplies float32 on ``device``, tried
    once on a tiny product: it is recent (graphfed's range of torch reaches further back), and
    a torch without it would fail every joined step."""
    try:
        grouped_linear(torch.ones(4, 4, device=device), torch.ones(2, 4, 4, device=device),
                       torch.tensor([2, 4], dtype=torch.int32, device=device))
    except (AttributeError, RuntimeError, NotImplementedError):
        return False
    return True


class StackedParam(Tensor):
    """A parameter stacked per client (``[K, ...]``), as the model's code sees it on joined
    rows: ``F.linear`` with a stacked weight becomes a grouped product over the clients' row
    blocks, a stacked bias is spread to its clients' rows, reading its shape or dtype is
    allowed, and any other computation with it is refused (the model then belongs outside
    ``JOINED_MODELS``). A tensor subclass, not a mode over every call: the model's other
    operations, a few hundred a pass, run without a Python hop each. ``joined_rows`` maps a
    joined tensor's row count to its owners (node rows, graph rows)."""

    joined_rows: dict[int, Rows]

    @classmethod
    def __torch_function__(cls, func: Callable[..., Any], types: tuple[type, ...],
                           args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
                           ) -> Any:
        kwargs = kwargs or {}
        with torch._C.DisableTorchFunctionSubclass():
            if func is F.linear:
                return _linear(*args, **kwargs)
            if func in _ELEMENTWISE and len(args) == 2 and not kwargs:
                data, bias = args[::-1] if isinstance(args[0], StackedParam) else args
                return data + _spread(bias, data)
            refusal = NotImplementedError(
                f"the joined layout cannot route a stacked parameter through {func.__name__}")
            try:
                out = func(*args, **kwargs)
            except RuntimeError as e:  # e.g. shapes a per-client tensor would have matched
                raise refusal from e
        if isinstance(out, Tensor):
            raise refusal
        return out


def stacked_params(params: Params, rows: dict[int, Rows]) -> Params:
    """``params`` as ``StackedParam`` views (still on the autograd graph) over ``rows``."""
    out: Params = {}
    for name, value in params.items():
        stacked = value.as_subclass(StackedParam)
        stacked.joined_rows = rows
        out[name] = stacked
    return out


def _linear(x: Tensor, weight: StackedParam, bias: StackedParam | None = None) -> Tensor:
    out = grouped_linear(x, weight, weight.joined_rows[x.size(0)].ends)
    return out if bias is None else out + _spread(bias, out)


def _spread(stacked: StackedParam, data: Tensor) -> Tensor:
    """A stacked ``[K, d]`` parameter as one row per row of ``data`` (its owner's)."""
    if stacked.dim() != 2 or data.dim() != 2:
        raise NotImplementedError("the joined layout spreads [K, d] biases over rows only")
    return stacked.index_select(0, stacked.joined_rows[data.size(0)].owner)


def grouped_linear(x: Tensor, weight: Tensor, ends: Tensor) -> Tensor:
    """Rows ``ends[k-1]:ends[k]`` of ``x`` times ``weight[k]`` transposed (``[K, out, in]``,
    ``F.linear``'s layout), in one grouped product. ``grouped_mm`` wants every stride a
    multiple of 16 bytes: an ``in`` or ``out`` that is not (PROTEINS' 3 features, two classes)
    is padded with zero columns, which add nothing, and the padding cut off the output."""
    step = GROUPED_ALIGNMENT // x.element_size()
    d_out, d_in = weight.shape[1:]
    pad_in, pad_out = -d_in % step, -d_out % step
    if pad_in:
        x, weight = F.pad(x, (0, pad_in)), F.pad(weight, (0, pad_in))
    if pad_out:
        weight = F.pad(weight, (0, 0, 0, pad_out))
    out = F.grouped_mm(x.contiguous(), weight.transpose(1, 2), offs=ends)
    return out[:, :d_out] if pad_out else out


def join_graph_batches(batches: list[GraphBatch]) -> tuple[GraphInputs, list[int]]:
    """Mini-batches of whole graphs as one batch (the model's inputs); where each one's
    graphs start."""
    nodes, graphs = [0], [0]
    for b in batches[:-1]:
        nodes.append(nodes[-1] + len(b.x))
        graphs.append(graphs[-1] + b.num_graphs)
    pairs = list(zip(batches, nodes, graphs, strict=True))
    # one model prepared them all: every batch's edges are weighted, or none are
    weight = (None if batches[0].edge_weight is None
              else torch.cat(cast(list[Tensor], [b.edge_weight for b in batches])))
    inputs = (torch.cat([b.x for b in batches]),
              torch.cat([b.edge_index + n for b, n, _ in pairs], 1),
              torch.cat([b.batch + g for b, _, g in pairs]),
              graphs[-1] + batches[-1].num_graphs, weight)
    return inputs, graphs


@dataclass
class JoinedBatch:
    """Many clients' graph batches joined: the model's inputs, the graphs' labels, the owners
    of node rows and of graph rows by row count (``StackedParam.joined_rows``), and of graph rows
    alone."""

    inputs: GraphInputs
    labels: Tensor
    rows: dict[int, Rows]
    graphs: Rows


def join_clients(chosen: list[GraphBatch | None]) -> JoinedBatch | None:
    """The clients' batches joined (a client without one holds no rows); None when nodes and
    graphs are as many, so that a row count would name no layout."""
    real = [b for b in chosen if b is not None]
    device = real[0].x.device
    nodes, graphs = (Rows.of(torch.tensor([0 if b is None else size(b) for b in chosen],
                                          device=device))
                     for size in (lambda b: len(b.x), lambda b: b.num_graphs))
    if nodes.count == graphs.count:
        return None
    inputs, _ = join_graph_batches(real)
    return JoinedBatch(inputs, torch.cat([b.y for b in real]),
                       {nodes.count: nodes, graphs.count: graphs}, graphs)


def joined_forward(model: nn.Module, live: Params, joined: JoinedBatch, keys: Tensor, step: int
                   ) -> Tensor:
    """Every joined row's output in training under its own client's parameters, dropout
    keyed by the client's key (``dropout.keyed_keep_rows``)."""
    with keyed(keys, step, rows=joined.rows):
        logits: Tensor = functional_call(model, stacked_params(live, joined.rows),
                                         joined.inputs)
        return logits
