"""Per-client statistics of a federated simulation (what `graphfed partition` prints)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch_geometric.data import Data
from torch_geometric.utils import to_undirected

from graphfed.data.federated import SPLITS, ClientData, FederatedData, NodeClient
from graphfed.data.partition.overlap_ratios import mean_overlap
from graphfed.plotting import legend_outside, saved_figure, title

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def edge_homophily(edge_index: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of edges joining two nodes of the same class (NaN without edges)."""
    if edge_index.numel() == 0:
        return float("nan")
    return float((y[edge_index[0]] == y[edge_index[1]]).float().mean())


def node_homophily(edge_index: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per node, the share of its neighbours that have its label, h_i = |{j ∈ N(i): y_j = y_i}|
    / |N(i)| (FedSpray, Fu et al. KDD 2024, Eq. 1), over the undirected graph without self-loops;
    NaN for a node without neighbours (the share is undefined)."""
    n = len(y)
    edges = to_undirected(edge_index, num_nodes=n)
    edges = edges[:, edges[0] != edges[1]]
    degree = torch.bincount(edges[0], minlength=n).double()
    same = torch.bincount(edges[0], weights=(y[edges[0]] == y[edges[1]]).double(), minlength=n)
    return same / degree


def majority_minority(graph: Data, num_classes: int) -> dict:
    """FedSpray's Table 1 row for one client, whose premise is that minority nodes sit among
    other classes: the majority class (the most frequent label over all its nodes, the lowest
    index on a tie), how many nodes have it and how many do not, and each group's mean node
    homophily inside the client's own graph (nodes without a neighbour there left out; NaN for
    a group with none)."""
    counts = torch.bincount(graph.y, minlength=num_classes)
    majority = int(torch.argmax(counts))  # the first maximum: the lowest class index
    is_majority = graph.y == majority
    homophily = node_homophily(graph.edge_index, graph.y)
    return {"majority_class": majority, "majority_nodes": int(is_majority.sum()),
            "minority_nodes": int((~is_majority).sum()),
            "majority_homophily": float(torch.nanmean(homophily[is_majority])),
            "minority_homophily": float(torch.nanmean(homophily[~is_majority]))}


def label_counts(client: ClientData, num_classes: int) -> list[int]:
    """How many samples of each class ``client`` holds, over all its splits."""
    labels = torch.cat([client.labels(s) for s in SPLITS])
    return torch.bincount(labels, minlength=num_classes).tolist()


def client_stats(data: FederatedData) -> list[dict]:
    """One row per client; with ``node_overlap``/``link_overlap`` (its true mean overlap with
    the others, r_i and l_i) where the partition makes clients overlap, and at node level with
    its ``majority_minority`` figures."""
    overlap = ({} if data.overlap is None else
               {f"{kind}_overlap": mean_overlap(ratios).tolist()
                for kind, ratios in data.overlap.items()})
    rows = []
    for i, client in enumerate(data.clients):
        counts = label_counts(client, data.num_classes)
        row = {"client": i, "samples": sum(counts), "label_counts": counts,
               **{s: client.num_samples(s) for s in SPLITS},
               **{key: values[i] for key, values in overlap.items()}}
        if isinstance(client, NodeClient):
            g = client.graph
            row.update(edges=g.edge_index.size(1) // 2,
                       homophily=edge_homophily(g.edge_index, g.y),
                       lost_edges=client.lost_edges // 2,
                       **majority_minority(g, data.num_classes))
        else:
            graphs = [g for s in SPLITS for g in client.graphs[s]]
            row.update(edges=sum(g.edge_index.size(1) for g in graphs) // 2,
                       homophily=float("nan"), lost_edges=0)
        rows.append(row)
    return rows


def plot_label_distribution(data: FederatedData, path: str | Path) -> Figure:
    """A stacked bar per client of its label counts, every client named on the axis (turned
    upright where there are many), saved to ``path``; the figure (closed) is returned."""
    rows = client_stats(data)
    clients = [r["client"] for r in rows]
    with saved_figure(path, max(7.0, len(rows) * 0.3 + 2.5), 4.5) as (fig, ax):
        bottom = [0] * len(rows)
        for c in range(data.num_classes):
            heights = [r["label_counts"][c] for r in rows]
            ax.bar(clients, heights, bottom=bottom, label=str(c))
            bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
        ax.set_xticks(clients, [str(c) for c in clients], rotation=90 if len(rows) > 20 else 0,
                      fontsize="small")
        ax.set_xlim(-0.6, len(rows) - 0.4)
        ax.set_xlabel("client")
        ax.set_ylabel("nodes" if data.level == "node" else "graphs")
        title(fig, ax, f"{data.dataset}: label distribution per client ({data.partition_id})")
        legend_outside(fig, ax, "class")
    return fig
