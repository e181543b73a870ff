"""Many clients' evaluation in one pass: the batched engine's ``Trainer.evaluate``.

Every client scores the parameters it deploys on its own splits, and its metrics come from its
own rows of the logits, all clients' at once (``metrics.joined_classification_metrics``), by
the function the sequential path uses.
Where every client deploys the same parameters (the FedAvg family) their graphs are joined
block-diagonally, no padding, and one plain forward pass scores them all: the arithmetic of
the clients one by one, without the per-client calls; node-level clients' scored rows are
gathered at once, by an index built with the join. Where they differ (personalised models)
graph-level clients on the CPU are each scored by their own plain pass (joined rows would pay
for spreading every bias over them); otherwise the graphs are padded into the layout training
uses (``padded.NodeLayout``; graph-level clients split by split; clients of similar size
together, ``grouping.size_groups``) and one ``vmap`` over ``functional_call`` runs each
client's own parameters on its own graph. The
shared global test set is scored once per distinct set of parameters (once in all under
FedAvg, whose clients all deploy the global model), all sets in one pass. Full-graph
evaluation draws no random numbers, so the metrics equal the sequential path's up to float
summation order.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor
from torch.func import functional_call
from torch_geometric.data import Batch, Data

from graphfed.metrics import Segments, joined_classification_metrics
from graphfed.models.sparse import PaddedCsr, is_csr, join_rows
from graphfed.tensors import Params
from graphfed.training import plans
from graphfed.training.batches import (
    NodeInputs,
    PreparedClient,
    PreparedEdgeClient,
    PreparedGraphClient,
    PreparedNodeClient,
)
from graphfed.training.grouping import by_size_group, group_rows, step_size
from graphfed.training.joined import join_graph_batches
from graphfed.training.padded import (
    Cache,
    Input,
    cached_for,
    graph_inputs,
    node_layout,
    stacked_forward,
)
from graphfed.training.trainer import SplitMetrics, Trainer

# how many (parameter set x global-test node) rows one pass over the global test set may hold
GLOBAL_ROWS = 1 << 22

Outputs = dict[str, tuple[Tensor, Tensor]]


@dataclass
class EvalJob:
    """One client's evaluation: the parameters it deploys, its data, the global test set."""

    params: Params
    data: PreparedClient
    global_test: PreparedClient | None


def eval_refusal(trainer: Trainer, data: PreparedClient) -> str | None:
    """Why this client cannot be evaluated in a stacked pass (None: it can)."""
    if getattr(trainer.model, "opts", None) is None:
        return f"{type(trainer.model).__name__} is not one of graphfed's GNN backbones"
    if isinstance(data, PreparedEdgeClient):
        return "it scores node pairs, which the stacked pass does not"
    if data.evaluation_draws:
        return "it evaluates on sampled neighbourhoods"
    return None


@torch.no_grad()
def evaluate_together(trainer: Trainer, jobs: list[EvalJob], cache: Cache | None = None
                      ) -> list[SplitMetrics]:
    """Each job's metrics per split, as ``Client.evaluate_params`` returns them (``global``
    for the shared global test set where the job has one). ``cache`` keeps the padded node
    layout of a set of clients between calls. The clients are of one level, as the first
    one (all ``PreparedNodeClient`` or all ``PreparedGraphClient``)."""
    trainer.model.eval()
    cache = {} if cache is None else cache
    clients = [j.data for j in jobs]
    node = isinstance(clients[0], PreparedNodeClient)
    if all(j.params is jobs[0].params for j in jobs):
        joined = cache.setdefault("joined", {})
        chunks = list(enumerate(_row_chunks(clients, group_rows(trainer, clients[0]))))
        if node:  # scored straight from the joined logits' rows
            metrics = [m for n, chunk in chunks for m in _joined_node_metrics(
                trainer, jobs[0].params, cast(list[PreparedNodeClient], chunk),
                joined.setdefault(n, {}))]
        else:
            metrics = trainer.clients_split_metrics(
                [o for n, chunk in chunks for o in _joined_graph_outputs(
                    trainer, jobs[0].params, cast(list[PreparedGraphClient], chunk),
                    joined.setdefault(n, {}))], clients)
    else:
        if not node and plans.for_device(trainer.device).joined:
            # where training joins (the CPU), each client's own plain pass: joined rows
            # through grouped products spread every bias over them, which costs an evaluation
            # more than the calls
            outputs = [trainer.outputs(j.params, c) for j, c in zip(jobs, clients, strict=True)]
        else:  # clients of similar size stacked together, as in training
            def run(members: list[int], group_cache: Cache | None) -> list[Outputs]:
                stacked = _stack([jobs[k].params for k in members])
                group = [clients[k] for k in members]
                return (_node_outputs(trainer, stacked, cast(list[PreparedNodeClient], group),
                                      group_cache) if node
                        else _graph_outputs(trainer, stacked,
                                            cast(list[PreparedGraphClient], group), group_cache))

            outputs = by_size_group(trainer, clients, [step_size(c, None) for c in clients],
                                    cache.setdefault("padded", {}), run)
        metrics = trainer.clients_split_metrics(outputs, clients)
    scored = [k for k, j in enumerate(jobs) if j.global_test is not None]
    if scored:
        on_global = _global_metrics(trainer, [jobs[k] for k in scored])
        for k, m in zip(scored, on_global, strict=True):
            metrics[k]["global"] = m
    return metrics


def _row_chunks(clients: list[PreparedClient], max_rows: float) -> list[list[PreparedClient]]:
    """The clients in consecutive chunks of at most ``max_rows`` rows (``grouping.group_rows``;
    a client larger than that alone): on a CPU, one pass over a million joined nodes streams
    every activation through memory, where passes of a hundred thousand stay in cache."""
    chunks: list[list[PreparedClient]] = []
    rows = 0.0
    for client in clients:
        size = step_size(client, None)
        if not chunks or rows + size > max_rows:
            chunks.append([])
            rows = 0.0
        chunks[-1].append(client)
        rows += size
    return chunks


def _stack(params: list[Params]) -> Params:
    return {name: torch.stack([p[name] for p in params]) for name in params[0]}


def _join_nodes(clients: list[PreparedNodeClient]) -> tuple[NodeInputs, list[int]]:
    """The clients' graphs as one block-diagonal graph (PyG's batching; CSR features joined
    row-wise); where each client's nodes start."""
    sparse_x = is_csr(clients[0].x)
    joined = Batch.from_data_list([
        Data(x=None if sparse_x else c.x, edge_index=c.edge_index, edge_weight=c.edge_weight,
             num_nodes=len(c.y)) for c in clients])
    x = join_rows([c.x for c in clients]) if sparse_x else joined.x
    inputs = (x, joined.edge_index, getattr(joined, "edge_weight", None))
    return inputs, joined.ptr[:-1].tolist()


@dataclass
class _JoinedNodes:
    """A chunk of clients' graphs joined (``_join_nodes``) and what their evaluation scores,
    built once per set of clients: the joined logits' rows of each client's scored splits
    (client by client, split by split), their labels, their sets of rows and majorities, so a
    round scores them with one gather instead of three operations a client and split."""

    inputs: NodeInputs
    splits: list[tuple[str, ...]]  # each client's scored splits, in order
    rows: Tensor
    target: Tensor
    segments: Segments
    majorities: list[int | None]

    @classmethod
    def of(cls, clients: list[PreparedNodeClient], splits: tuple[str, ...]) -> _JoinedNodes:
        inputs, starts = _join_nodes(clients)
        held = [tuple(s for s in splits if c.num_samples(s)) for c in clients]
        scored = [(c.index[s], start, c) for c, start, own in zip(clients, starts, held,
                                                                   strict=True) for s in own]
        empty = clients[0].y.new_zeros(0)  # so that a chunk with nothing to score joins too
        return cls(inputs, held,
                   torch.cat([empty, *(index + start for index, start, _ in scored)]),
                   torch.cat([empty, *(c.y[index] for index, _, c in scored)]),
                   Segments.of([len(index) for index, _, _ in scored], empty.device),
                   [c.train_majority for _, _, c in scored])


def _joined_node_metrics(trainer: Trainer, params: Params, clients: list[PreparedNodeClient],
                         cache: Cache) -> list[SplitMetrics]:
    joined = cached_for(cache, (trainer.own_splits, *(id(c) for c in clients)),
                        lambda: _JoinedNodes.of(clients, trainer.own_splits))
    if not joined.majorities:  # nothing to score
        return [{} for _ in clients]
    logits = functional_call(trainer.model, params, joined.inputs)
    scores = iter(joined_classification_metrics(
        logits.index_select(0, joined.rows), joined.target, joined.segments,
        joined.majorities, trainer.num_classes))
    return [{s: next(scores) for s in own} for own in joined.splits]


def _joined_graph_outputs(trainer: Trainer, params: Params, clients: list[PreparedGraphClient],
                          cache: Cache) -> list[Outputs]:
    outputs: list[Outputs] = [{} for _ in clients]
    for split in trainer.own_splits:
        holders = [k for k, c in enumerate(clients) if c.num_samples(split)]
        if not holders:
            continue
        batches = [clients[k].splits[split].all() for k in holders]
        inputs, starts = cached_for(cache.setdefault(split, {}),
                                 tuple(id(clients[k]) for k in holders),
                                 functools.partial(join_graph_batches, batches))
        logits = functional_call(trainer.model, params, inputs)
        for k, b, start in zip(holders, batches, starts, strict=True):
            outputs[k][split] = (logits[start:start + b.num_graphs], b.targets)
    return outputs


def _node_outputs(trainer: Trainer, stacked: Params, clients: list[PreparedNodeClient],
                  cache: Cache | None) -> list[Outputs]:
    layout = node_layout(clients, cache)
    logits = stacked_forward(trainer.model, stacked, None, 0, layout.inputs())
    return [{s: (logits[k, c.index[s]], c.y[c.index[s]])
             for s in trainer.own_splits if c.num_samples(s)} for k, c in enumerate(clients)]


def _graph_outputs(trainer: Trainer, stacked: Params, clients: list[PreparedGraphClient],
                   cache: Cache | None) -> list[Outputs]:
    """Each client's own parameters on its own graphs, padded, split by split; each split's
    padding kept in ``cache`` for this set of clients (whole splits come back every round)."""
    outputs: list[Outputs] = [{} for _ in clients]
    features = clients[0].splits["train"].x.size(1)
    for split in trainer.own_splits:
        batches = [c.splits[split].all() if c.num_samples(split) else None for c in clients]
        if all(b is None for b in batches):
            continue
        inputs, _, _ = cached_for(None if cache is None else cache.setdefault(split, {}),
                                  tuple(id(c) for c in clients),
                                  functools.partial(graph_inputs, batches, trainer.device,
                                                    features))
        logits = stacked_forward(trainer.model, stacked, None, 0, inputs)
        for k, b in enumerate(batches):
            if b is not None:
                outputs[k][split] = (logits[k][:b.num_graphs], b.targets)
    return outputs


def _global_metrics(trainer: Trainer, jobs: list[EvalJob]) -> list[dict[str, float]]:
    """The global test metrics of each job, scored once per distinct parameter set."""
    position: dict[int, int] = {}
    distinct: list[Params] = []
    for j in jobs:
        if id(j.params) not in position:
            position[id(j.params)] = len(distinct)
            distinct.append(j.params)
    test = jobs[0].global_test
    assert test is not None  # the jobs scored on the global test set
    inputs: tuple[Input, ...]
    if isinstance(test, PreparedNodeClient):
        x = PaddedCsr.of(test.x) if is_csr(test.x) else test.x  # vmap maps no CSR matrix
        inputs = (x, test.edge_index, test.edge_weight)
        rows, index, labels = len(test.y), test.index["test"], test.y
    else:
        assert isinstance(test, PreparedGraphClient), "the edge level has no global test set"
        batch = test.splits["test"].all()
        inputs = (batch.x, batch.edge_index, batch.batch, batch.num_graphs, batch.edge_weight)
        rows, index, labels = len(batch.x), None, batch.targets
    chunk = max(1, GLOBAL_ROWS // max(rows, 1))
    outputs: list[Outputs] = []
    for start in range(0, len(distinct), chunk):
        logits = stacked_forward(trainer.model, _stack(distinct[start:start + chunk]), None, 0,
                                 inputs, batched_inputs=False)
        outputs += [{"test": (one[index], labels[index]) if index is not None
                     else (one, labels)} for one in logits]
    scores = trainer.clients_split_metrics(outputs, [test] * len(outputs))
    return [scores[position[id(j.params)]]["test"] for j in jobs]
