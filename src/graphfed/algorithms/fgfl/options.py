"""FGFL's options: the paper's defaults, every ablation switch of its Table 4 and the choices
where the paper and its authors' code differ (``shared/specs/fgfl.md`` §3, §5)."""

from __future__ import annotations

from typing import Literal, cast

from pydantic import Field

from graphfed.algorithms.averaging.leave_one_out import LeaveOneOutOptions
from graphfed.algorithms.registry import RunView
from graphfed.algorithms.rewards.base import RewardOptions
from graphfed.data.motifs import TfidfOne

# One coalition costs 0.8-1.4 ms with FGFL's 29,506-parameter GIN (PROTEINS, one CPU thread,
# a shared 2-core machine), so 2^12 = 4,096 coalitions take 3-6 s a round, 10-20 min over the
# paper's 200 rounds, and every client more doubles that
EXACT_SHAPLEY_MAX_CLIENTS = 12
SECONDS_PER_COALITION = 1e-3


NO_NODE_MOTIFS = ("where motifs, which both need, have no definition (FairGFL's node-level FGFL "
                  "baseline drops them, spec fairgfl.md §7.5 F9); true is refused there")


class FGFLOptions(LeaveOneOutOptions, RewardOptions):
    alpha1: float = Field(0.05, ge=0.0, description="weight of this round in the value update")
    alpha2: float = Field(1.0, ge=0.0, description="weight of diversity relative to alignment")
    proto_weight: float = Field(0.1, ge=0.0, description="lambda of the prototype regulariser")
    budget: float = Field(1.0, gt=0.0, description="payoff budget B per round")
    keep_fraction: float = Field(0.9, gt=0.0, le=1.0, description="beta_s of TF-IDF filtering")
    max_ring: int = Field(
        4, ge=3, description="longest cycle kept as a ring motif. Code: 4 (client.py "
        "motif_construction; its filter removes from the list it loops over, so a few longer "
        "cycles survive). Paper: no cap (App. Def. 5: every cycle); a large value, e.g. 1000, "
        "keeps every cycle of the cycle basis")
    tfidf_one: TfidfOne = Field(
        "in_idf", description="where TF-IDF's +1 sits. in_idf (code, client.py "
        "motif_construction): count * (log((1+|D|)/(1+n_k)) + 1); after_count (paper Eq. 16 "
        "as printed): count * log((1+|D|)/(1+n_k)) + 1")
    value_update: Literal["additive", "ema"] = Field(
        "additive", description="additive (paper Eq. 10) or r <- 0.95 r + 0.05 phi (code's "
        "reputation loops in training.py)")
    use_alignment: bool = Field(True, description="ablation: drop phi from Eq. 10")
    use_diversity: bool | None = Field(
        None, description="the graph-diversity term of Eq. 10 (false: the ablation alpha2 = 0). "
        f"Unset: on for graph-level tasks, off for node-level ones, {NO_NODE_MOTIFS}")
    value_weighted_agg: bool = Field(True, description="ablation: size-weighted aggregate")
    use_prototypes: bool | None = Field(
        None, description="the motif prototypes and their regulariser (false: the ablation "
        f"lambda = 0). Unset: on for graph-level tasks, off for node-level ones, {NO_NODE_MOTIFS}")
    proto_distance: Literal["mse", "l2"] = Field(
        "mse", description="prototype distance in Eq. 14: mse over the 64 dimensions (code, "
        "client.py prototype_train) or the L2 norm (paper Eq. 14/18)")
    proto_reduce: Literal["mean", "sum"] = Field(
        "mean", description="over motifs: mean (code) or sum (paper Eq. 14/18)")
    proto_scope: Literal["batch", "dataset"] = Field(
        "batch", description="local prototypes of the regulariser from the mini-batch's graphs "
        "(code) or from all the agent's training graphs (paper Eq. 11, recomputed each step)")
    proto_from_train_pass: bool = Field(
        False, description="uploaded prototypes from embeddings seen during training (code) "
        "instead of an eval-mode pass after it (paper Eq. 11 with the trained omega)")
    proto_weights: Literal["value", "per_motif_rep"] = Field(
        "value", description="prototype weights: ReLU(value) (paper Eq. 12) or per-motif "
        "reputations (code, server.py)")
    init_proto: Literal["mean", "count_weighted", "count_weighted_paper_eq19"] = Field(
        "count_weighted", description="round-0 global prototypes. mean: Eq. 12 at r0 = 1/N "
        "(paper, main text); count_weighted_paper_eq19: weighted by motif graph counts with "
        "Eq. 19's extra 1/|N_k| (paper App. Eq. 19 and code, server.py aggregate_prototype); "
        "count_weighted: the same without 1/|N_k| (the spec's reading, neither)")
    initial_proto_norm: Literal["clip_unit", "none"] = Field(
        "clip_unit", description="setup prototypes divided by max(norm, 1) (code, client.py "
        "prototype_update) or sent as Eq. 11 gives them (paper)")
    exact_shapley: bool = Field(
        False, description="also compute the exact gradient-Shapley value (2^N coalitions "
        f"every round; at most {EXACT_SHAPLEY_MAX_CLIENTS} clients)")


def motif_term(choice: bool | None, level: str) -> bool:
    """Whether a motif-based term (diversity, prototypes) is on: as chosen, else for graphs."""
    return level == "graph" if choice is None else choice


def check_fgfl(config: RunView) -> None:
    """The config checks of FGFL: no motif term at node level, no endless Shapley value."""
    refuse_node_motifs(config)
    refuse_endless_shapley(config)


def refuse_node_motifs(config: RunView) -> None:
    """Motifs are rings and bonds of a graph-classification sample (App. Def. 5); a node-level
    client holds one graph, so neither diversity nor prototypes exist there."""
    options = config.algorithm_options()
    if config.level != "graph":
        on = [f"fgfl.{name}=true" for name in ("use_diversity", "use_prototypes")
              if getattr(options, name)]
        if on:
            raise ValueError(f"{' and '.join(on)}: FGFL's motif diversity and prototypes "
                             "exist only for graph-level tasks; leave them unset (off) at node "
                             "level")


def refuse_endless_shapley(config: RunView) -> None:
    """The exact gradient-Shapley value enumerates every coalition of the round's agents, each
    a weighted sum over their updates: its cost doubles with each client, so a run that could
    not finish is refused while the config is read rather than hours into round 1."""
    n = config.num_clients
    if (cast(FGFLOptions, config.algorithm_options()).exact_shapley
            and n > EXACT_SHAPLEY_MAX_CLIENTS):
        per_round = SECONDS_PER_COALITION * 2**n
        raise ValueError(
            f"fgfl.exact_shapley enumerates 2^n coalitions every round: n={n} clients is "
            f"{2**n:,}, about {_duration(per_round)} per round and "
            f"{_duration(per_round * config.rounds)} for {config.rounds} rounds; use at most "
            f"{EXACT_SHAPLEY_MAX_CLIENTS} clients, or fgfl.exact_shapley=false (FGFL's cosine "
            "alignment alone)")


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:,.0f} s"
    return f"{seconds / 60:,.0f} min" if seconds < 7200 else f"{seconds / 3600:,.0f} h"
