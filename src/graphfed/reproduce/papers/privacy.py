"""graphfed's own privacy-utility curve: DP-FedAvg (``graphfed.privacy.dp_fedavg``) on the
quickstart federation, test accuracy against the ledger's ε as the noise multiplier σ grows.

The federation is ``configs/quickstart.yaml``'s (Cora, 10 Louvain clients packed, 40/30/30
splits, a 2-layer GCN of width 64, 5 local epochs of Adam at 0.01), run 20 rounds with 5 of the
10 clients a round (q = 0.5), every update clipped to C = 1 and summed uniformly with
N(0, (σC)²) added at the server. The reference row is FedAvg with the same uniform weights and no
noise. Each seed's accuracy is that of its last evaluated round (``final``: no selection on any
data, since a private run may not pick its round on a test set) and its ε the ledger's total at
δ = 1e-5 (``summary.json`` ``privacy.epsilon``, RDP).
"""

from __future__ import annotations

from pathlib import Path

from graphfed.reproduce.figures import privacy_curve
from graphfed.reproduce.preset import Preset, Variant, register
from graphfed.reproduce.score import RoundValue, SummaryValue, register_metrics

UTILITY = "test_acc_pooled"
METRICS = register_metrics({UTILITY: RoundValue("test_acc_pooled"),
                            "epsilon": SummaryValue(("privacy", "epsilon"), better="lower")})
NOISE_MULTIPLIERS = ("0.03", "0.1", "0.3", "1", "3")
QUICKSTART = ["partition=louvain", "partition.mode=pack", "partition.split=[0.4,0.3,0.3]",
              "num_clients=10", "model.name=gcn", "model.hidden=64", "model.layers=2",
              "model.dropout=0.5", "model.sparse_features=auto", "local_epochs=5",
              "optimizer.name=adam", "optimizer.lr=0.01", "optimizer.weight_decay=0.0005"]
PROTOCOL = [*QUICKSTART, "rounds=20", "eval_every=5", "client_fraction=0.5"]

VARIANTS = [Variant("fedavg[uniform]", "fedavg", ("fedavg.weighted=false",)),
            *(Variant(f"dp-fedavg[sigma={s}]", "fedavg",
                      (f"dp.noise_multiplier={s}", "dp.clip=1.0"))
              for s in NOISE_MULTIPLIERS)]


def tradeoff(rows: list[dict], out: Path) -> Path:
    """Test accuracy against ε, a point per σ; FedAvg without noise dashed."""
    return privacy_curve(rows, out / "privacy_curve.png", UTILITY,
                         "DP-FedAvg on the quickstart (Cora, 10 clients, q = 0.5, C = 1, "
                         "20 rounds)")


DP_TRADEOFF = register(Preset(
    name="dp-tradeoff",
    description="DP-FedAvg's privacy-utility curve on the quickstart: pooled test accuracy "
                "against the ledger's epsilon for noise multipliers 0.03 to 3",
    variants=VARIANTS, datasets=["Cora"], metrics=METRICS, base=PROTOCOL, seeds=3,
    quick=["rounds=4"], quick_seeds=1, figures=[tradeoff],
    notes="test_acc_pooled: the test accuracy over all clients' test nodes at the last "
          "evaluated round (final; not selected on any data). epsilon: the privacy ledger's "
          "total over the run at delta = 1e-5 (RDP accountant; client-level, add/remove one "
          "client). Uniform weights in every row (DP-FedAvg's mean is uniform), C = 1, "
          "q = 5/10, 20 rounds.",
    cost="one seed of one row: about a minute on 2 CPU cores"))
