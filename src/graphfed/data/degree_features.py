"""Degree features for featureless graphs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch_geometric.data import Data


def one_hot_degree(graphs: list[Data], cap: int | None = None) -> list[Data]:
    """Featureless graphs (IMDB-*, REDDIT-BINARY) get one-hot node degrees, as the GCFL, FedStar
    and GPFL code does with PyG's ``OneHotDegree``. Without a cap there is one column per degree up
    to the dataset's max degree; with one there are ``cap + 1`` columns and larger degrees fall into
    the last (GPFL clips the degrees of its random graphs the same way), so the width, and the
    memory, stay bounded on graphs with hubs."""
    import torch
    from torch_geometric.data import Data
    from torch_geometric.utils import degree

    degrees = [degree(g.edge_index[0], g.num_nodes, dtype=torch.long) for g in graphs]
    if cap is None:
        max_degree = int(max(int(d.max()) if d.numel() else 0 for d in degrees))
    else:
        max_degree = cap
        degrees = [d.clamp(max=cap) for d in degrees]
    out = []
    for g, d in zip(graphs, degrees, strict=True):
        # set the ones in a float matrix: F.one_hot would first build an int64 copy twice the size
        x = torch.zeros(g.num_nodes, max_degree + 1)
        x[torch.arange(g.num_nodes), d] = 1.0
        out.append(Data(x=x, edge_index=g.edge_index, y=g.y, num_nodes=g.num_nodes))
    return out
