"""Per-client statistics of a federated simulation (what `graphfed partition` prints)."""

from __future__ import annotations

from pathlib import Path

import torch

from graphfed.data.federated import SPLITS, ClientData, FederatedData, NodeClient
from graphfed.data.partition.overlap_ratios import mean_overlap


def edge_homophily(edge_index: torch.Tensor, y: torch.Tensor) -> float:
    """Fraction of edges joining two nodes of the same class (NaN without edges)."""
    if edge_index.numel() == 0:
        return float("nan")
    return float((y[edge_index[0]] == y[edge_index[1]]).float().mean())


def label_counts(client: ClientData, num_classes: int) -> list[int]:
    """How many samples of each class ``client`` holds, over all its splits."""
    labels = torch.cat([client.labels(s) for s in SPLITS])
    return torch.bincount(labels, minlength=num_classes).tolist()


def client_stats(data: FederatedData) -> list[dict]:
    """One row per client; with ``node_overlap``/``link_overlap`` (its true mean overlap with
    the others, r_i and l_i) where the partition makes clients overlap."""
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
                       lost_edges=client.lost_edges // 2)
        else:
            graphs = [g for s in SPLITS for g in client.graphs[s]]
            row.update(edges=sum(g.edge_index.size(1) for g in graphs) // 2,
                       homophily=float("nan"), lost_edges=0)
        rows.append(row)
    return rows


def plot_label_distribution(data: FederatedData, path: str | Path) -> None:
    """A stacked bar per client of its label counts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = client_stats(data)
    fig, ax = plt.subplots(figsize=(max(6, len(rows) * 0.5), 4))
    bottom = [0] * len(rows)
    for c in range(data.num_classes):
        heights = [r["label_counts"][c] for r in rows]
        ax.bar([r["client"] for r in rows], heights, bottom=bottom, label=f"class {c}")
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set_xlabel("client")
    ax.set_ylabel("nodes" if data.level == "node" else "graphs")
    ax.set_title(f"{data.dataset}: label distribution per client ({data.partition_id})")
    ax.legend(fontsize="small", ncol=2)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
