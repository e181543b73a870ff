"""The pieces of the quickstart round that issue 20's second overhead pass made cheaper, each
timed against the way PyTorch (or graphfed before) does it, on the quickstart's client 0
(Cora, Louvain, 10 clients):

    GRAPHFED_DATA=../shared/datasets OMP_NUM_THREADS=1 python benchmarks/overhead_parts.py

prints one ``RESULT part=... ours_us=... alternative_us=...`` line a piece (mean microseconds
a call). ``alternative`` is: unfused Adam, ``F.dropout``, ``F.linear``'s own CSR backward, the
average of a stacked float64 copy, ``seeded_call`` around every client, ``Function.apply``
with its signature binding.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.mechanisms.aggregation import weighted_average
from graphfed.metrics import classification_metrics
from graphfed.models.dropout import dropout
from graphfed.models.propagation import _WeightedSum, weighted_sum
from graphfed.models.sparse import linear
from graphfed.seeding import reseed, seeded_call


def mean_us(call: Callable[[], object], repeats: int) -> float:
    for _ in range(20):
        call()
    start = time.perf_counter()
    for _ in range(repeats):
        call()
    return (time.perf_counter() - start) / repeats * 1e6


def stacked_average(params, weights):
    """The average as graphfed took it before: every client's tensors stacked in float64."""
    w = torch.tensor(weights, dtype=torch.float64)
    w = w / w.sum()
    out = {}
    for name in params[0]:
        stacked = torch.stack([p[name] for p in params]).to(torch.float64)
        shape = (-1,) + (1,) * (stacked.dim() - 1)
        out[name] = (stacked * w.view(shape)).sum(0).to(params[0][name].dtype)
    return out


def main() -> None:
    config = load_config("configs/quickstart.yaml", ["checkpoint_every=0"])
    fed = build_federation(config, seed=0)
    fed.setup()
    data = fed.runtime.contexts[0].data
    params = fed.trainer.initial_params()
    x = data.x  # CSR features of client 0
    weight = params["convs.0.lin.weight"].clone().requires_grad_(True)
    hidden = torch.randn(x.size(0), 64)
    results = {}

    def adam(fused: bool) -> Callable[[], None]:
        live = [p.clone().requires_grad_(True) for p in params.values()]
        for p in live:
            p.grad = torch.randn_like(p)
        return lambda: torch.optim.Adam(live, lr=0.01, weight_decay=5e-4, fused=fused).step()

    results["fresh_adam_step"] = (adam(True), adam(False))
    values = x.values()
    results["dropout_feature_values"] = (lambda: dropout(values, 0.5, True),
                                         lambda: F.dropout(values, 0.5, True))
    results["dropout_hidden"] = (lambda: dropout(hidden, 0.5, True),
                                 lambda: F.dropout(hidden, 0.5, True))

    def first_layer(product) -> Callable[[], None]:
        def step():
            out = product(dropout(x, 0.5, True), weight)
            torch.autograd.grad(out.sum(), weight)
        return step

    results["sparse_first_layer_fwd_bwd"] = (first_layer(linear), first_layer(F.linear))
    models = [{k: v + 0.01 * i for k, v in params.items()} for i in range(10)]
    sizes = [float(i + 1) for i in range(10)]
    results["fedavg_average_10_models"] = (lambda: weighted_average(models, sizes),
                                           lambda: stacked_average(models, sizes))

    def seeding(each: bool) -> Callable[[], None]:
        def ten_clients():
            if each:
                for c in range(10):
                    with seeded_call(0, 1, c, "fit"):
                        pass
            else:
                with seeded_call(0, 1, 2**32 - 1, "fit"):
                    for c in range(10):
                        reseed(0, 1, c, "fit")
        return ten_clients

    results["seeding_10_clients"] = (seeding(False), seeding(True))
    logits, target = torch.randn(300, 7), torch.randint(0, 7, (300,))
    results["metrics_one_split"] = (lambda: classification_metrics(logits, target, 7, 2), None)
    edges, edge_weight = data.edge_index, data.edge_weight
    y = hidden.clone().requires_grad_(True)
    size = y.size(0)
    results["weighted_sum_call"] = (
        lambda: weighted_sum(y, edges, edge_weight),
        lambda: _WeightedSum.apply(y, edges, edge_weight, size))
    for part, (ours, alternative) in results.items():
        line = f"RESULT part={part} ours_us={mean_us(ours, 500):.1f}"
        if alternative is not None:
            line += f" alternative_us={mean_us(alternative, 500):.1f}"
        print(line)


if __name__ == "__main__":
    main()
