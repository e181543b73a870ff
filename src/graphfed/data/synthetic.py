"""A contextual stochastic block model: an explicitly synthetic dataset for scale tests.

Never a stand-in for a named benchmark. Labels are uniform over ``classes``; each undirected edge
joins two nodes of the same class with probability ``homophily``; features are a class mean scaled
by ``signal`` plus standard Gaussian noise.
"""

from __future__ import annotations

import torch
from pydantic import BaseModel, Field
from torch_geometric.data import Data

from graphfed.data.adjacency import csr_edge_index, undirected_csr
from graphfed.validation import OPTIONS, Seed

CHUNK = 1 << 20  # rows per step of the feature construction


class CSBMOptions(BaseModel):
    model_config = OPTIONS

    nodes: int = Field(10_000, gt=1)
    classes: int = Field(5, ge=2)
    features: int = Field(64, ge=1)
    homophily: float = Field(0.8, ge=0.0, le=1.0)
    signal: float = Field(1.0, ge=0.0)
    degree: float = Field(10.0, gt=0.0)
    seed: Seed = 0


def contextual_sbm(opts: CSBMOptions) -> Data:
    """Sample a CSBM graph deterministically from ``opts.seed``."""
    gen = torch.Generator().manual_seed(opts.seed)
    n, c = opts.nodes, opts.classes
    y = torch.randint(c, (n,), generator=gen)
    members = [torch.nonzero(y == k).view(-1) for k in range(c)]
    num_edges = max(1, int(n * opts.degree / 2))
    src = torch.randint(n, (num_edges,), generator=gen)
    same = torch.rand(num_edges, generator=gen) < opts.homophily
    # Same-class target: a random member of src's class; otherwise a random node of another class.
    offset = torch.randint(1, c, (num_edges,), generator=gen)
    target_class = torch.where(same, y[src], (y[src] + offset) % c)
    sizes = torch.tensor([len(m) for m in members])
    pick = (torch.rand(num_edges, generator=gen) * sizes[target_class]).long()
    starts = torch.cumsum(torch.cat([torch.zeros(1, dtype=torch.long), sizes[:-1]]), 0)
    flat = torch.cat(members)
    dst = flat[starts[target_class] + pick]
    keep = src != dst
    edges = torch.stack([src[keep], dst[keep]])
    del src, dst, same, offset, target_class, pick, keep
    edge_index = csr_edge_index(undirected_csr(edges, n))  # as to_undirected gives it
    del edges
    means = torch.randn(c, opts.features, generator=gen)
    x = torch.randn(n, opts.features, generator=gen)
    for rows in torch.arange(n).split(CHUNK):  # the class means added without an n x d temporary
        x[rows] += opts.signal * means[y[rows]]
    return Data(x=x, edge_index=edge_index, y=y)
