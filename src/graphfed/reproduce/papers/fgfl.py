"""FGFL's tables and figures (Pan et al., AAAI 2024): Table 2, Table 4 (ablation), the payoff
histogram of the perturbed setting (Fig. 3b), the beta trade-off (Fig. 3a), the lambda sweep
(Fig. 4) and the per-round leave-one-out contributions (Fig. 1b, 1c).

Paper numbers are those printed in the paper (spec ``shared/specs/fgfl.md`` sections 4-5), in
``tables/fgfl/table2.csv`` and ``table4.csv``; a method or dataset without a number has no row."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from graphfed.algorithms.averaging.leave_one_out import RECORD
from graphfed.build import federated_data
from graphfed.data.partition.graph import quality_tier_flips
from graphfed.errors import GraphfedError
from graphfed.mechanisms.payoff import PAYOFF_BASELINES
from graphfed.metrics import pearson
from graphfed.reproduce.figures import (
    grouped_bars,
    panel_curves,
    signed_heatmaps,
    tradeoff_scatter,
)
from graphfed.reproduce.plan import Cell
from graphfed.reproduce.preset import Preset, Variant, paper_numbers, register
from graphfed.reproduce.score import (
    WHOLE_RUN,
    Metric,
    Reading,
    RoundValue,
    Scoring,
    each_seed,
    register_metrics,
    seed_lines,
    seed_round,
)
from graphfed.serialization import read_metrics


def fairness_vectors(reference: Cell, cell: Cell, on: str = "local",
                     rule: str = "final") -> dict[int, dict]:
    """Per seed: both per-agent accuracy vectors (on each agent's local test set, or on the
    global test set) and their Pearson correlation; each run's vector is from the round the
    rule picks for its client-mean accuracy on that test set."""
    key, mean_key = (("test_acc", "test_acc") if on == "local"
                     else ("global_acc", "client_global_test_acc"))
    out = {}
    for seed in cell.summary["seeds"]:
        alone = [c[key] for c in seed_round(reference, seed, mean_key, rule)["clients"]]
        together = [c[key] for c in seed_round(cell, seed, mean_key, rule)["clients"]]
        out[seed] = {"self_train": alone, "federated": together,
                     "pearson": pearson(alone, together)}
    return out


@dataclass(frozen=True)
class GradientFairness(Metric):
    """Model-gradient fairness: per seed, the Pearson correlation of the per-agent accuracies
    of the preset's reference run (self-training) and of the federated run, of the same setting
    and fold; the vectors go to ``vectors.json``. The reference itself has no row."""

    def read(self, cells: list[Cell], scoring: Scoring) -> Reading | None:
        values = None
        for cell in cells:
            reference = scoring.references.get((cell.dataset, cell.fold))
            if reference is None or reference is cell:
                continue
            pairs = fairness_vectors(reference, cell, scoring.fairness_on, scoring.rule)
            fold = "" if cell.fold is None else f"/fold={cell.fold}"
            scoring.vectors[f"{cell.variant.method}/{cell.dataset}{fold}"] = pairs
            values = (values or []) + [p["pearson"] for p in pairs.values()]
        if values is None and cells:
            return None
        return values, scoring.rule


# personalised accuracy: each agent's own model on its local test graphs; global: the global
# model on the global test graphs
ACCURACY = register_metrics({"personalized_acc": RoundValue("test_acc"),
                             "global_acc": RoundValue("global_test_acc")})
FAIRNESS = register_metrics({"gradient_fairness": GradientFairness()})
TABLE_METRICS = (*ACCURACY, *FAIRNESS)

TRAINING = ["model=gin", "model.hidden=64", "model.layers=3", "model.dropout=0.5",
            "model.pooling=add", "num_clients=10", "rounds=200", "local_epochs=1",
            "batch_size=128", "optimizer.name=adam", "optimizer.lr=0.001",
            "optimizer.weight_decay=0.0005", "eval_every=200"]
# the paper: 10 % global test, GCFL chunking of the rest, 90/10 inside each agent
PROTOCOL = ["partition=gcfl_chunk", "partition.chunk=50", "partition.global_test=0.1",
            "partition.split=[0.9,0.0,0.1]", *TRAINING]
# the paper's code: its one split (seed 123 for every repeat), 80/10/10 inside each agent
CODE_SPLIT_PROTOCOL = ["partition=gcfl_code", *TRAINING]
QUICK = ["rounds=40", "eval_every=40"]
DATASETS = ["PROTEINS", "DD", "IMDB-BINARY"]

METHODS = [Variant("self-train", "local"), Variant("fedavg", "fedavg"),
           Variant("fedprox", "fedprox"), Variant("fedsage", "fedsage"),
           Variant("gcfl", "gcfl"), Variant("gcfl+", "gcfl+"), Variant("fedstar", "fedstar"),
           Variant("dw", "dw"), Variant("eu", "eu"), Variant("cffl", "cffl"),
           Variant("cgsv", "cgsv"), Variant("fgfl", "fgfl")]

# GCFL's own per-dataset thresholds (its runnerfile): eps1 / eps2 / sequence length (DD: the
# one-dataset defaults). GCFL's clients keep their Adam state across rounds, and its split rule
# needs that: a fresh Adam's single step moves every weight by ~lr, so the cluster's mean update
# never falls below eps1 and no cluster ever splits.
_GCFL = {"PROTEINS": (0.03, 0.06, 10), "IMDB-BINARY": (0.025, 0.045, 5), "DD": (0.05, 0.1, 5)}
GCFL_OVERRIDES = {
    (method, dataset): ["optimizer.persistent=true", f"{method}.eps1={e1}",
                        f"{method}.eps2={e2}"] + (
        [f"{method}.seq_length={seq}"] if method == "gcfl+" else [])
    for dataset, (e1, e2, seq) in _GCFL.items() for method in ("gcfl", "gcfl+")}

TABLE2 = register(Preset(
    name="fgfl-table2",
    description="FGFL Table 2: 12 methods on PROTEINS, DD, IMDB-BINARY",
    variants=METHODS, datasets=DATASETS,
    metrics=TABLE_METRICS, base=PROTOCOL, quick=QUICK, paper=paper_numbers("fgfl", "table2"),
    reference="self-train", cell_overrides=GCFL_OVERRIDES,
    notes="Personalised accuracy: mean over agents of each agent's model on its local test "
          "graphs; global accuracy: the global model on the 10% global test graphs (methods "
          "without a global model have none); gradient fairness: Pearson correlation of the "
          "self-train and the federated per-agent accuracies (vectors in vectors.json)."))

TABLE2_CODE_SPLIT = register(replace(
    TABLE2, name="fgfl-table2-code-split",
    description="FGFL Table 2 on the split FGFL's code draws (fixed for every seed)",
    base=CODE_SPLIT_PROTOCOL,
    notes="The split is the one FGFL's code draws with its fixed seed 123 (partition "
          "gcfl_code): GCFL chunking, 80/10/10 inside each agent; the agents' validation "
          "graphs (10 %, never trained on) are the global test set. Seeds vary the model and "
          "training only, as the paper's repeats do. " + TABLE2.notes))

# FGFL as its paper specifies it, wherever the paper and the authors' code differ (each option's
# description names both settings; the defaults are the spec's choices, mostly the code's)
PAPER_SPEC = (
    "fgfl.proto_distance=l2", "fgfl.proto_reduce=sum", "fgfl.proto_scope=dataset",  # Eq. 14
    "fgfl.normalize_update=none",  # Eqs. 9 and 13 on the raw update
    "fgfl.initial_proto_norm=none",  # Eq. 11, no clipping to norm 1
    "fgfl.init_proto=mean",  # Eq. 12 at r0 = 1/N
    "fgfl.max_ring=1000",  # App. Def. 5: every cycle is a ring
    "fgfl.tfidf_one=after_count",  # Eq. 16 as printed
    "fgfl.reward_apply=reset_then_add",  # beta = inf is vanilla FL (§3.1)
)
PAPER_SPEC_PRESET = register(Preset(
    name="fgfl-paper-spec",
    description="FGFL with the defaults and with every paper-or-code option at the paper's "
                "setting (PAPER_SPEC), Table 2's protocol",
    variants=[Variant("fgfl", "fgfl"), Variant("fgfl[paper-spec]", "fgfl", PAPER_SPEC)],
    datasets=DATASETS, metrics=TABLE_METRICS, base=PROTOCOL, quick=QUICK,
    reference="self-train",
    paper={k: v for k, v in paper_numbers("fgfl", "table2").items() if k[0] == "fgfl"},
    notes="fgfl[paper-spec] sets " + ", ".join(PAPER_SPEC) + "; the other options' defaults "
          "are already the paper's (value_update, proto_weights, mask_mode, shared_params, "
          "proto_from_train_pass). " + TABLE2.notes))

# Table 4: ablations on clean PROTEINS
_SWITCHES = {
    "fgfl": (), "fgfl-no-alignment": ("fgfl.use_alignment=false",),
    "fgfl-no-diversity": ("fgfl.use_diversity=false",),
    "fgfl-no-reward": ("fgfl.sparsify_reward=false",),
    "fgfl-no-value-agg": ("fgfl.value_weighted_agg=false",),
    "fgfl-no-prototype": ("fgfl.use_prototypes=false",),
}
ABLATION = register(Preset(
    name="fgfl-ablation",
    description="FGFL Table 4: ablations on PROTEINS",
    variants=[Variant("self-train", "local")] + [
        Variant(m, "fgfl", s) for m, s in _SWITCHES.items()],
    datasets=["PROTEINS"], metrics=TABLE_METRICS, base=PROTOCOL, quick=QUICK,
    reference="self-train", paper=paper_numbers("fgfl", "table4")))

@dataclass(frozen=True)
class GroupPayoff(Metric):
    """The mean payoff per round per agent of one data-quality group (``Preset.groups``), one
    value per seed asked for (a volume-based baseline runs nothing)."""

    group: str

    def read(self, cells: list[Cell], scoring: Scoring) -> Reading:
        members = scoring.preset.groups[self.group]
        return [sum(payoffs[c] for c in members) / len(members) for cell in cells
                for payoffs in (payoff_per_agent(cell, s) for s in scoring.seeds)], WHOLE_RUN


def payoff_per_agent(cell: Cell, seed: int) -> list[float]:
    """Each agent's mean payoff per round in one seed of ``cell``."""
    if cell.variant.algorithm is None:  # a volume-based baseline: the same payoff every round
        data = federated_data(cell.config, seed)
        sizes = [c.num_samples("train") for c in data.clients]
        return PAYOFF_BASELINES[cell.variant.method](sizes, 1.0)
    rounds = [line["server"]["payoff"] for line in seed_lines(cell, seed)
              if line["round"] > 0 and "payoff" in line.get("server", {})]
    if not rounds:
        raise GraphfedError(f"{cell.variant.method} records no payoff; it cannot fill a payoff "
                            "table")
    return [sum(r[c] for r in rounds) / len(rounds) for c in range(len(rounds[0]))]


FLIPS, GROUPS = quality_tier_flips(10, seed=0)
PAYOFFS = register_metrics({f"payoff_{g}": GroupPayoff(g, decimals=4)
                            for g in ("high", "medium", "low")})


def _payoff_figure(rows: list[dict], out: Path) -> Path:
    return grouped_bars(rows, out / "payoff.png", groups=("high", "medium", "low"),
                        title="Mean payoff per round per agent, by data quality (cf. Fig. 3b)")


PAYOFF = register(Preset(
    name="fgfl-payoff",
    description="FGFL Fig. 3b: payoff per data-quality group in the perturbed setting",
    variants=[Variant("fgfl", "fgfl"),
              Variant("fgfl[shared=convs]", "fgfl", ("fgfl.shared_params=convs",))] + [
        Variant(m, None) for m in ("equal", "individual", "union", "shapley")],
    datasets=["PROTEINS", "IMDB-BINARY"],
    metrics=PAYOFFS,
    base=[*PROTOCOL, f"partition.edge_flip={FLIPS}"], quick=QUICK, groups=GROUPS,
    figures=[_payoff_figure],
    notes=f"Perturbed setting: agents {GROUPS['low']} low quality, {GROUPS['medium']} medium, "
          f"{GROUPS['high']} high; edge-flip ratios of their training graphs {FLIPS} (test "
          "graphs clean). fgfl[shared=convs] exchanges only the GIN convolutions, as FGFL's "
          "code does. The paper gives this result as a figure only (no numbers)."))

BETAS = (0.5, 1.0, 1.5, 2.0)


def _tradeoff_figure(rows: list[dict], out: Path) -> Path:
    return tradeoff_scatter(rows, out / "tradeoff.png",
                            title="Personalised accuracy vs fairness over beta (cf. Fig. 3a)")


TRADEOFF = register(Preset(
    name="fgfl-tradeoff",
    description="FGFL Fig. 3a: accuracy-fairness trade-off over beta",
    variants=[Variant("self-train", "local")] + [
        Variant(f"{m}[beta={b}]", m, (f"{m}.beta={b}", f"{m}.reward_shape=tanh"))
        for m in ("fgfl", "cgsv", "dw", "eu", "cffl") for b in BETAS],
    datasets=["PROTEINS"], metrics=("personalized_acc", *FAIRNESS), base=PROTOCOL,
    quick=QUICK, reference="self-train", figures=[_tradeoff_figure],
    notes="Every point sizes rewards by tanh(beta r), as FGFL's code does for all its reward "
          "baselines; CFFL (RFFL) would otherwise use r / max r, where beta does nothing. The "
          "paper gives this result as a figure only (no numbers)."))

# Fig. 4: the prototype regulariser's weight lambda (fgfl.proto_weight) around the paper's best
# 0.1: off, then roughly half-decades from 0.01 to 1, the range the paper's figure spans
LAMBDAS = (0.0, 0.01, 0.05, 0.1, 0.5, 1.0)


def _lambda_figure(rows: list[dict], out: Path) -> Path:
    def curve(method: str, metric: str) -> list[tuple[float, float, float]]:
        return [(float(r["method"].split("=")[1].rstrip("]")), r["ours_mean"], r["ours_std"])
                for r in rows if r["method"].startswith(f"{method}[lambda=")
                and r["metric"] == metric and r["ours_mean"] is not None]

    panels = {"accuracy": {"personalised": curve("fgfl", "personalized_acc"),
                           "global": curve("fgfl", "global_acc")},
              "model-gradient fairness": {"MGF": curve("fgfl", "gradient_fairness")}}
    return panel_curves(panels, out / "lambda.png", "lambda (symlog; 0 = no regulariser)",
                        "mean over seeds ± std", "FGFL over the prototype weight (cf. Fig. 4)",
                        linthresh=LAMBDAS[1])


LAMBDA = register(Preset(
    name="fgfl-lambda",
    description="FGFL Fig. 4: accuracy and fairness over the prototype weight lambda",
    variants=[Variant("self-train", "local")] + [
        Variant(f"fgfl[lambda={x:g}]", "fgfl", (f"fgfl.proto_weight={x:g}",)) for x in LAMBDAS],
    datasets=["PROTEINS"], metrics=TABLE_METRICS, base=PROTOCOL, quick=QUICK,
    reference="self-train", figures=[_lambda_figure],
    notes="lambda weighs Eq. 14's prototype regulariser (fgfl.proto_weight); at lambda = 0 the "
          "prototypes are still exchanged but pull nothing (the ablation's fgfl-no-prototype "
          "drops them too). The paper gives this result as a figure only (no numbers); its "
          "best is lambda = 0.1. " + TABLE2.notes))


@dataclass(frozen=True)
class NegativeShare(Metric):
    """Per seed, the share of (agent, round) contributions below 0 over the rounds in the
    fraction [start, stop) of the run (the server's ``leave_one_out`` record)."""

    start: float
    stop: float

    def read(self, cells: list[Cell], scoring: Scoring) -> Reading:
        def share(cell: Cell, seed: int) -> float | None:
            rows = contributions(cell, seed)
            if not rows:
                return None
            chosen = rows[int(self.start * len(rows)):int(self.stop * len(rows))]
            values = [v for row in chosen for v in row]
            return sum(v < 0 for v in values) / len(values)

        return each_seed(cells, share), WHOLE_RUN


def contributions(cell: Cell, seed: int) -> list[list[float]]:
    """One seed's contributions, a row per round (agents in id order)."""
    return recorded_contributions(seed_lines(cell, seed))


def recorded_contributions(lines: list[dict]) -> list[list[float]]:
    """The contributions of a run's ``metrics.jsonl`` lines, from the server's
    ``leave_one_out`` records; empty where the run did not record them."""
    return [line["server"][RECORD]["contribution"] for line in lines
            if RECORD in line.get("server", {})]


CONTRIBUTION_METRICS = register_metrics({
    "negative_share_first_quarter": NegativeShare(0.0, 0.25),
    "negative_share_last_quarter": NegativeShare(0.75, 1.0)})
CONTRIBUTION_METHODS = ("fedavg", "fgfl")


def _contribution_figure(rows: list[dict], out: Path) -> Path:
    """Seed 0's agents x rounds contributions per method (one run, as the paper's figure)."""
    matrices: dict[str, Sequence[Sequence[float]]] = {}
    for method in dict.fromkeys(r["method"] for r in rows):
        path = out / "runs" / f"{method}-PROTEINS" / "seed-0" / "metrics.jsonl"
        by_round = recorded_contributions(read_metrics(path)) if path.is_file() else []
        if by_round:
            matrices[method] = [list(agent) for agent in zip(*by_round, strict=True)]
    return signed_heatmaps(matrices, out / "contribution.png",
                           "Agent contribution (acc_all - acc_-i) / acc_-i on the global test "
                           "set, seed 0 (cf. Fig. 1b, 1c)", "round", "agent", "contribution")


CONTRIBUTION = register(Preset(
    name="fgfl-contribution",
    description="FGFL Fig. 1b/1c: each agent's leave-one-out contribution per round, FedAvg "
                "and FGFL, 5 equal agents",
    variants=[Variant(m, m, (f"{m}.leave_one_out=true",)) for m in CONTRIBUTION_METHODS],
    datasets=["PROTEINS"], metrics=("global_acc", *CONTRIBUTION_METRICS),
    base=[*PROTOCOL, "partition=uniform", "num_clients=5"], quick=QUICK, seeds=3,
    quick_seeds=1, figures=[_contribution_figure],
    notes="5 equal agents (partition uniform; 10 % global test graphs, 90/10 inside each "
          "agent). Each round the server scores on the global test set its aggregate with every "
          "agent and the same aggregation rerun without agent i: FedAvg's size-weighted mean "
          "of the others, FGFL's round (Eq. 13's value weights renormalised over the others) "
          "from the same starting state. Contribution (acc_all - acc_-i) / acc_-i; "
          "negative_share_*: the share of agent-rounds below 0 in the run's first and last "
          "quarter. The paper gives this result as a figure only (no numbers)."))
