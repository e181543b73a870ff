"""FedTAD's client side (Section 4.1): how reliable a client's knowledge of each class is,
measured on its subgraph before training and sent with every model.

1. Topology-aware node embedding: h_v = [x_v || p_v], with p_v = [T_vv, (T²)_vv, ..., (T^K)_vv]
   the landing probabilities of K-step random walks that start at v (random-walk positional
   encoding), T = D̃⁻¹Ã the walk on the self-looped subgraph.
2. Node reliability: the mean cosine similarity of h_v to itself and to its neighbours,
   r_v = (1 + Σ_{u∈N(v)} cos(h_v, h_u)) / (|N(v)| + 1), a topology-aware homophily.
3. Class-wise knowledge reliability: CKR^c = Σ_{v ∈ train, y_v = c} r_v, large for a class with
   many training nodes (node variation) in a homophilous neighbourhood (topology variation).

The server normalises the clients' CKR (``normalised_reliability``) and weighs each client's
teaching of each class by it.

Versus the authors' code (``zyl24/FedTAD`` ``util/task_util.py`` ``cal_topo_emb``; OpenFGL's
copy): its topology embedding samples one walk of each length 1..K per node and concatenates
the visited node ids, from a transition row that ``A * pinverse(D)`` (an element-wise product)
makes all but uniform over the subgraph, so its p_v are random node ids; here p_v are the
landing probabilities the paper describes, computed exactly (no random draw). A class whose
summed similarity is negative (possible with signed features) gets reliability 0.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor
from torch_geometric.utils import add_remaining_self_loops

from graphfed.models.propagation import weighted_sum
from graphfed.training.batches import PreparedNodeClient

CHUNK = 4096  # walk starts propagated together: memory n × CHUNK per step


def landing_probabilities(edge_index: Tensor, num_nodes: int, steps: int) -> Tensor:
    """p_v = [(T^k)_vv for k = 1..K], T = D̃⁻¹Ã on the self-looped graph (n × K, float64):
    walks started at a chunk of nodes are propagated together, one sparse product a step, so
    no n × n matrix is ever held."""
    looped, _ = add_remaining_self_loops(edge_index, num_nodes=num_nodes)
    source = looped[0]
    degree = torch.bincount(source, minlength=num_nodes).to(torch.float64)
    # a walk at v moves to each of its d̃_v neighbours u with probability 1/d̃_v, so the
    # probability mass at u after a step is Σ_v mass_v / d̃_v over the edges (v, u)
    weight = (1.0 / degree)[source]
    out = torch.empty(num_nodes, steps, dtype=torch.float64, device=edge_index.device)
    for start in range(0, num_nodes, CHUNK):
        starts = torch.arange(start, min(start + CHUNK, num_nodes), device=edge_index.device)
        mass = torch.zeros(num_nodes, len(starts), dtype=torch.float64, device=edge_index.device)
        mass[starts, torch.arange(len(starts), device=edge_index.device)] = 1.0
        for k in range(steps):
            mass = weighted_sum(mass, looped, weight)
            out[starts, k] = mass[starts, torch.arange(len(starts), device=mass.device)]
    return out


def node_reliability(embedding: Tensor, edge_index: Tensor) -> Tensor:
    """r_v = (1 + Σ_{(v, u) ∈ E} cos(h_v, h_u)) / (|{(v, u) ∈ E}| + 1) for every node v, the
    edges as given (both directions of an undirected graph; the code's out-neighbours)."""
    n = embedding.shape[0]
    unit = F.normalize(embedding.to(torch.float64), dim=1)
    source, target = edge_index
    cosine = (unit[source] * unit[target]).sum(dim=1)
    reverse = torch.stack([target, source])  # sums over each source's edges
    ones = torch.ones(n, 1, dtype=torch.float64, device=embedding.device)
    similarity = weighted_sum(ones, reverse, cosine, n).view(-1)
    count = torch.bincount(source, minlength=n).to(torch.float64)
    return (1.0 + similarity) / (count + 1.0)


def class_reliability(data: PreparedNodeClient, num_classes: int, walk_length: int) -> Tensor:
    """CKR^c over the client's training nodes of class c (float32, length C, ≥ 0)."""
    graph = data.graph
    device = data.y.device
    edges = graph.edge_index.to(device)
    features = graph.x.to(device=device, dtype=torch.float64)
    walks = landing_probabilities(edges, graph.num_nodes, walk_length)
    r = node_reliability(torch.cat([features, walks], dim=1), edges)
    train = data.index["train"]
    one_hot = F.one_hot(data.y[train], num_classes).to(torch.float64)
    return (one_hot.T @ r[train]).clamp_min(0.0).to(torch.float32)


def normalised_reliability(reliability: Tensor, norm: str) -> Tensor:
    """ω_i^c from the clients' CKR (rows: clients, columns: classes): CKR_i^c / Σ_j CKR_j^c
    over the clients (``clients``) or CKR_i^c / Σ_c' CKR_i^c' over a client's classes
    (``classes``); 0 where the sum is 0 (a class no client trains on)."""
    total = reliability.sum(dim=0 if norm == "clients" else 1, keepdim=True)
    return torch.where(total > 0, reliability / total.clamp_min(1e-30),
                       torch.zeros_like(reliability))
