"""GPFL's six structural properties of every graph of a dataset (spec gpfl.md §3.4, §7.1.1; the
code's ``dataprocess/data_property.py:network_properties``), cached on disk.

GPFL's server builds its initial client network from per-client means of these (Eqs. 10-12).
Definitions, with n nodes, d the node degrees of the undirected graph and E_dir = 2|E| the number
of directed edge entries:

1. average degree mean(d);
2. density E_dir / (n(n-1)), 0 where n < 2 (as the code);
3. degree variance mean(d^2) - mean(d)^2;
4. network entropy, ``entropy_form="code"``: mean_v(d_v log d_v) / E_dir (the code's form, the
   default); ``"paper"``: Eq. 10's sum_v d_v log d_v / |E| with |E| = E_dir / 2, 2n times larger.
   0 log 0 = 0: the code's log(d + 1e-12) only guards d = 0 (its float32 drops the 1e-12 for any
   d >= 1), which ``xlogy`` gives exactly;
5. negative scale-free exponent -(1 / mean(d) + 2);
6. average closeness centrality: the mean over nodes of networkx's ``closeness_centrality``
   (Wasserman-Faust scaled for disconnected graphs; 0 for an isolated node).

A graph without edges gets 0 for 1-5 (the code's guard; the exponent would be -inf). The code
averages the degrees over nodes 0 .. (last node with an edge), leaving out isolated nodes
numbered after it; here the mean is over all n nodes, as the spec defines it. No PROTEINS or NCI1
graph has such a trailing node, and the values match the code's shipped ``property/*.pt`` to
float32 rounding on every graph (``benchmarks/verify_gpfl_properties.py``).
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Literal

import networkx as nx
import torch
from torch_geometric.utils import to_undirected

from graphfed.data.datasets import cache_dir, save_to_cache
from graphfed.serialization import safe_load

if TYPE_CHECKING:
    from pathlib import Path

    from torch_geometric.data import Data

    from graphfed.data.datasets import GraphDataset

EntropyForm = Literal["code", "paper"]
PROPERTIES = ("average_degree", "density", "degree_variance", "network_entropy",
              "negative_scale_free_exponent", "closeness_centrality")
CACHE_VERSION = 1


def graph_properties(edge_index: torch.Tensor, num_nodes: int,
                     entropy_form: EntropyForm = "code") -> torch.Tensor:
    """The six properties (float64, in ``PROPERTIES`` order) of one graph."""
    edges = to_undirected(edge_index, num_nodes=num_nodes)
    e_dir = edges.size(1)
    if e_dir == 0:
        return torch.zeros(len(PROPERTIES), dtype=torch.float64)
    d = torch.bincount(edges[0], minlength=num_nodes).double()
    mean = d.mean()
    entropy = torch.xlogy(d, d).sum() / (num_nodes * e_dir if entropy_form == "code"
                                          else e_dir / 2)
    density = e_dir / (num_nodes * (num_nodes - 1)) if num_nodes > 1 else 0.0
    return torch.tensor([mean, density, (d * d).mean() - mean**2, entropy, -(1 / mean + 2),
                         _mean_closeness(edges, num_nodes)], dtype=torch.float64)


def _mean_closeness(edges: torch.Tensor, num_nodes: int) -> float:
    graph = nx.Graph()
    graph.add_nodes_from(range(num_nodes))
    graph.add_edges_from(edges.t().tolist())
    return sum(nx.closeness_centrality(graph).values()) / num_nodes


def dataset_properties(data: GraphDataset, entropy_form: EntropyForm = "code") -> torch.Tensor:
    """The properties of every graph of ``data`` (graphs x ``PROPERTIES``), computed once and
    then read from the cache, keyed by the dataset's name and a digest of its graphs' edges."""
    key = {"version": CACHE_VERSION, "dataset": data.name, "entropy_form": entropy_form,
           "structure": structure_digest(data.graphs)}
    path = cache_path(key)
    if path.exists():
        saved = safe_load(path, "graph-property cache", remedy="delete it and graphfed "
                          "computes the properties again")
        if isinstance(saved, dict) and saved.get("key") == key:
            return saved["values"]
    values = torch.stack([graph_properties(g.edge_index, g.num_nodes, entropy_form)
                          for g in data.graphs])
    save_to_cache({"key": key, "values": values}, path, f"{data.name}'s graph properties")
    return values


def structure_digest(graphs: list[Data]) -> str:
    """A digest of what the properties depend on: every graph's node count and edges, in order."""
    digest = hashlib.sha256()
    for g in graphs:
        digest.update(torch.tensor([g.num_nodes, g.edge_index.size(1)]).numpy().tobytes())
        digest.update(g.edge_index.to(torch.int64).contiguous().numpy().tobytes())
    return digest.hexdigest()[:16]


def cache_path(key: dict) -> Path:
    return (cache_dir() / "properties"
            / f"{key['dataset'].lower()}-{key['entropy_form']}-{key['structure']}.pt")
