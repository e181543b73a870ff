"""FairGFL's server side (Zhou et al., TPDS 2025, Sec. V-B/C): estimating how much the clients'
subgraphs overlap from their privatised samples, and weighting them so that data held by many
clients is not counted many times.

Step 3 matches privatised encodings across clients (r_hat), scales the sample ratios to whole
subgraphs (Theorem V.4, V.5) and accumulates them over rounds; Eq. 24 folds node and link
overlap into one ratio o_i; Eq. 25 turns it into aggregation weights; Eq. 27 adds a step toward
the client with the largest loss.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch
from torch import Tensor

from graphfed.errors import GraphfedError
from graphfed.mechanisms.matching import greedy_pairs
from graphfed.tensors import Params

LinkScaling = Literal["linear", "quadratic"]
LINK_SCALINGS: tuple[str, ...] = ("linear", "quadratic")
Accumulation = Literal["ema", "running_mean"]
ACCUMULATIONS: tuple[str, ...] = ("ema", "running_mean")
FairWeighting = Literal["inv_one_plus_sum", "inv_one_plus_mean", "one_minus"]
FAIR_WEIGHTINGS: tuple[str, ...] = ("inv_one_plus_sum", "inv_one_plus_mean", "one_minus")

OverlapState = dict[str, Tensor]
"""The server's accumulated N x N node and link ratios and how often each pair was observed:
tensors only, so a checkpoint reads it back with ``weights_only=True``."""


def _unknown(kind: str, value: str, choices: tuple[str, ...]) -> GraphfedError:
    return GraphfedError(f"unknown {kind} {value!r}; choose one of {', '.join(choices)}")


def calibrate_threshold(public_encodings: Tensor, privatise: Callable[[Tensor], Tensor],
                        quantile: float = 0.95) -> float:
    """The matching threshold tau (UNKNOWN in the paper; spec §3.3): privatise the same public
    encodings twice, independently, and take the ``quantile`` of the distances between the two
    releases of each node. Two clients privatise a shared node independently, so about that
    share of true matches falls under tau. A fixed tau is the alternative (pass it directly)."""
    return torch.quantile(_release_distances(public_encodings, privatise), quantile).item()


def match_recall(public_encodings: Tensor, privatise: Callable[[Tensor], Tensor],
                 tau: float) -> float:
    """The share of true matches tau keeps: the public encodings privatised twice, independently,
    and the share of nodes whose two releases fall under tau (the tau_quantile, for a calibrated
    tau). A shared node is matched with this probability, so a sampled match ratio divided by it
    estimates the shared share without the bias of a strict tau."""
    return (_release_distances(public_encodings, privatise) < tau).double().mean().item()


def _release_distances(encodings: Tensor, privatise: Callable[[Tensor], Tensor]) -> Tensor:
    """Each node's distance between two independent privatisations of its encoding."""
    first, second = privatise(encodings), privatise(encodings)
    distances: Tensor = (first.to(torch.float64) - second.to(torch.float64)).norm(dim=1)
    return distances


def _distances(sample_i: Tensor, sample_j: Tensor) -> Tensor:
    return torch.cdist(sample_i.to(torch.float64), sample_j.to(torch.float64))


def node_matches(sample_i: Tensor, sample_j: Tensor, tau: float) -> Tensor:
    """Which rows u of S_i have some v in S_j with d(u, v) < tau (Sec. V-B)."""
    return _matched(_distances(sample_i, sample_j), tau)


def _matched(distance: Tensor, tau: float) -> Tensor:
    if distance.shape[1] == 0:
        return torch.zeros(distance.shape[0], dtype=torch.bool)
    return distance.min(dim=1).values < tau


def greedy_matching(sample_i: Tensor, sample_j: Tensor, tau: float) -> Tensor:
    """A one-to-one matching of S_i to S_j under tau, greedy by smallest distance (ties by row,
    then column): ``partner[u]`` is u's row in S_j, or -1 (``greedy_pairs``)."""
    return greedy_pairs(_distances(sample_i, sample_j), tau)


def scaled_node_overlap(sample_ratio: float, size_j: int, sample_size_j: int) -> float:
    """Theorem V.4 / Lemma C.1: uniform samples give E|S_i ∩ S_j| = |V_i ∩ V_j| (b_i/n_i)
    (b_j/n_j), so R_hat_ij = r_hat_ij n_j / b_j, clipped to 1 (the corrected matrix R~)."""
    return min(1.0, sample_ratio * size_j / sample_size_j)


def sample_link_overlap(links_i: Tensor, links_j: Tensor, partner: Tensor) -> float:
    """l_hat_ij (Theorem V.5, RECONSTRUCTED): the share of the links of S_i's corrected
    adjacency whose two endpoints are matched (``partner``, from ``greedy_matching``) to nodes of
    S_j that are linked in S_j's corrected adjacency too; 0 if S_i has no link."""
    rows, cols = torch.triu_indices(len(links_i), len(links_i), 1)
    present = links_i[rows, cols].bool()
    if not present.any():
        return 0.0
    matched = (partner[rows] >= 0) & (partner[cols] >= 0) & present
    shared = links_j[partner[rows[matched]], partner[cols[matched]]].bool()
    return shared.sum().item() / present.sum().item()


def scaled_link_overlap(sample_ratio: float, node_ratio: float, size_j: int, sample_size_j: int,
                        scaling: LinkScaling = "linear") -> float:
    """L_hat_ij from the sample's l_hat_ij, clipped to [0, 1]; 0 when no node matched.

    RECONSTRUCTED (spec §3.3, §7.5 F6): ``linear`` (default) scales by n_j / b_j as the paper's
    proof does ("similar to Lemma C.1": the link ratio among sampled overlapping nodes equals the
    one among all of them); ``quadratic`` scales by (n_j / b_j)^2, the pair-sampling arithmetic
    without that uniformity assumption.
    """
    if node_ratio == 0:
        return 0.0
    if scaling == "linear":
        factor = size_j / sample_size_j
    elif scaling == "quadratic":
        factor = (size_j / sample_size_j) ** 2
    else:
        raise _unknown("link scaling", scaling, LINK_SCALINGS)
    return min(1.0, max(0.0, sample_ratio * factor))


def round_overlaps(encodings: Sequence[Tensor], links: Sequence[Tensor], sizes: Sequence[int],
                   tau: float, scaling: LinkScaling = "linear",
                   recall: float = 1.0) -> tuple[Tensor, Tensor]:
    """One round of Step 3 over the K participating clients' uploads (privatised encodings
    b_k x d and corrected adjacencies b_k x b_k) and their node counts n_k: the K x K matrices
    R~ (node) and L~ (link) of this round, row i about client i, zero diagonal. ``recall``
    (``match_recall``; 1: no correction) divides the node match ratio, and its square the link
    ratio, whose two endpoints must both be matched."""
    if scaling not in LINK_SCALINGS:
        raise _unknown("link scaling", scaling, LINK_SCALINGS)
    count = len(encodings)
    node = torch.zeros(count, count, dtype=torch.float64)
    link = torch.zeros(count, count, dtype=torch.float64)
    samples = [e.to(torch.float64) for e in encodings]  # converted once, not once per pair
    for i in range(count):
        for j in range(count):
            if i == j or len(samples[i]) == 0 or len(samples[j]) == 0:
                continue
            distance = torch.cdist(samples[i], samples[j])
            ratio = _matched(distance, tau).double().mean().item()
            if ratio == 0:  # no node matched: L_ij is 0 without a matching (most pairs)
                continue
            node[i, j] = scaled_node_overlap(ratio / recall, sizes[j], len(samples[j]))
            partner = greedy_pairs(distance, tau)
            shared = sample_link_overlap(links[i], links[j], partner) / recall**2
            link[i, j] = scaled_link_overlap(shared, ratio, sizes[j], len(samples[j]), scaling)
    return node, link


def empty_overlap_state(num_clients: int) -> OverlapState:
    """Nothing observed yet: all ratios 0, all counts 0."""
    zeros = torch.zeros(num_clients, num_clients, dtype=torch.float64)
    return {"node": zeros, "link": zeros.clone(),
            "observed": torch.zeros(num_clients, num_clients, dtype=torch.long)}


def accumulate_overlaps(state: OverlapState, clients: Sequence[int], node: Tensor, link: Tensor,
                        rule: Accumulation = "ema", kappa: float = 0.9) -> OverlapState:
    """Fold one round's K x K estimates (rows and columns in the order of ``clients``, global
    ids) into the N x N state; pairs not observed this round keep their values. Returns a new
    state.

    RECONSTRUCTED (spec §3.3 step 4, §7.1-4): ``ema`` (default) R^t = kappa R^(t-1) +
    (1 - kappa) R~^t, a first observation initialising the entry, kappa = 0.9 (Table III's
    non-overlapping clients at 1e-10 are what an early false match decays to under it);
    ``running_mean`` averages all observations so far.
    """
    if rule not in ACCUMULATIONS:
        raise _unknown("accumulation", rule, ACCUMULATIONS)
    index = torch.as_tensor(list(clients), dtype=torch.long)
    rows, cols = index.view(-1, 1), index.view(1, -1)
    seen = state["observed"][rows, cols]
    if rule == "ema":
        keep = torch.where(seen > 0, kappa, 0.0).to(torch.float64)
    else:
        keep = seen.to(torch.float64) / (seen + 1)
    off_diagonal = ~torch.eye(len(index), dtype=torch.bool)
    out = {name: tensor.clone() for name, tensor in state.items()}
    for name, fresh in (("node", node), ("link", link)):
        updated = keep * state[name][rows, cols] + (1 - keep) * fresh.to(torch.float64)
        out[name][rows, cols] = torch.where(off_diagonal, updated, state[name][rows, cols])
    out["observed"][rows, cols] = seen + off_diagonal.long()
    return out


def overall_overlap(node: Tensor, link: Tensor, gamma: float = 0.5) -> Tensor:
    """Eq. 24 (RECONSTRUCTED, spec §3.4): o_i = gamma mean_{j != i} R_ij + (1 - gamma)
    mean_{j != i} L_ij over all N - 1 other clients (entries never observed count as 0).
    gamma, the paper's "coupling weight", is UNKNOWN; 0.5 by default."""
    others = len(node) - 1
    if others < 1:
        return torch.zeros(len(node), dtype=torch.float64)
    off = ~torch.eye(len(node), dtype=torch.bool)
    node_mean = (node.to(torch.float64) * off).sum(1) / others
    link_mean = (link.to(torch.float64) * off).sum(1) / others
    return gamma * node_mean + (1 - gamma) * link_mean


def fair_weights(overlap: Tensor, num_clients: int, rule: FairWeighting = "inv_one_plus_sum",
                 sizes: Sequence[float] | None = None) -> Tensor:
    """Eq. 25: aggregation weights p_i of the participating clients, decreasing in o_i, summing
    to 1 (float64). ``num_clients`` is N, the whole federation.

    RECONSTRUCTED from Theorem D.1 (spec §3.4, §7.5 F7): if clients sharing a node share their
    whole subgraph, a subgraph held by m clients has o = (m - 1) / (N - 1) at each holder;
    ``inv_one_plus_sum`` (default) p_i ∝ 1 / (1 + (N - 1) o_i) = 1 / m_i then counts every
    subgraph once. Alternatives: ``inv_one_plus_mean`` p_i ∝ 1 / (1 + o_i) and ``one_minus``
    p_i ∝ max(1 - o_i, 0) + 1e-6. ``sizes`` multiplies by the client sizes n_i (off by
    default: the paper's footnote 2 takes size-independent weights).
    """
    o = overlap.to(torch.float64)
    if rule == "inv_one_plus_sum":
        raw = 1 / (1 + (num_clients - 1) * o)
    elif rule == "inv_one_plus_mean":
        raw = 1 / (1 + o)
    elif rule == "one_minus":
        raw = (1 - o).clamp(min=0) + 1e-6
    else:
        raise _unknown("fair weighting", rule, FAIR_WEIGHTINGS)
    if sizes is not None:
        raw = raw * torch.as_tensor(list(sizes), dtype=torch.float64)
    return raw / raw.sum()


def max_loss_step(aggregate: Params, current: Params, local_models: Sequence[Params],
                  losses: Sequence[float], lam: float = 0.1) -> Params:
    """Eq. 27's server step (RECONSTRUCTED pseudo-gradient, spec §3.5, §7.5 F8):
    theta^(t+1) = theta^(t+1/2) + lam (theta_i* - theta^t), with i* the client whose reported
    loss of the received model theta^t is the largest (first on ties): one step on lam F_i*,
    client i*'s local update standing in for its gradient. lam = 0.1 (UNKNOWN) by default;
    lam = 0 returns ``aggregate`` itself. The alternative ``exact_grad`` (a second exchange
    for the gradient of F_i*) is not implemented."""
    if lam == 0:
        return aggregate
    worst = local_models[int(torch.as_tensor(list(losses), dtype=torch.float64).argmax())]
    return {name: value + lam * (worst[name] - current[name]) for name, value in aggregate.items()}
