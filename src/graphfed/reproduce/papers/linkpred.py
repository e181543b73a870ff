"""graphfed's own link-prediction table: four node-level graphs (Cora, CiteSeer, Amazon-Photo,
Coauthor-CS) split into 10 clients by Louvain or Metis, each client predicting its own held-out
edges (``level: edge``), with a centralised row (one client holding the whole graph) and Local
(each client alone) beside the federated methods. No paper reports this protocol: the table has
no published column.

The protocol is ``configs/linkpred-cora.yaml``'s: each client splits its own edges 85/5/10 into
training, validation and test supervision edges (``data.edges``: the test predictions pass
messages over training and validation edges, the others over training edges only; edges between
two clients are left out); a 2-layer GCN encoder (hidden 32, 16-dimensional embeddings) with an
inner-product decoder, binary cross-entropy on each epoch's fresh negatives (one per edge), Adam
0.01 without weight decay, 50 rounds × 2 local epochs, every 5th round evaluated. Each seed's
numbers come from the evaluated round of highest validation AUC averaged over clients
(``max_val_auc``).

The methods are every algorithm that declares the edge level (``Algorithm.levels``), read from
the registry, FedAvg, FedProx and Local first. The centralised row is Local with one client
(``num_clients=1``, ``partition=uniform``): the whole graph's edges split 85/5/10, the same run
whichever partition its setting names.
"""

from __future__ import annotations

from graphfed.reproduce.preset import Preset, Variant, declared_methods, register
from graphfed.reproduce.score import RoundValue, register_metrics
from graphfed.reproduce.settings import value_label

RULE = "max_val_auc"
METRICS = register_metrics({
    "pooled_auc": RoundValue("test_auc_pooled"),
    "pooled_ap": RoundValue("test_ap_pooled", better="higher"),
    "pooled_hits@50": RoundValue("test_hits@50_pooled", better="higher"),
    "pooled_mrr": RoundValue("test_mrr_pooled", better="higher")})
DATASETS = ("Cora", "CiteSeer", "Amazon-Photo", "Coauthor-CS")
PARTITIONS: dict[str, tuple[str, ...]] = {"louvain": ("partition=louvain",),
                                          "metis": ("partition=metis",)}
SETTING_KEYS: dict[str, str | dict[str, tuple[str, ...]]] = {"partition": PARTITIONS}
CLIENTS = 10
PROTOCOL = ["level=edge", f"num_clients={CLIENTS}", "model.name=gcn", "model.hidden=32",
            "model.embedding=16", "model.layers=2", "model.dropout=0.0", "model.decoder=inner",
            "edges.val=0.05", "edges.test=0.1", "optimizer.name=adam", "optimizer.lr=0.01",
            "optimizer.weight_decay=0.0", "client_fraction=1.0", "rounds=50", "local_epochs=2",
            "eval_every=5"]
QUICK = ["rounds=10"]
FIRST = ("fedavg", "fedprox", "local")
CENTRALISED = Variant("centralised", "local", ("num_clients=1", "partition=uniform"))


NOTES = ("pooled_*: each client's test AUC, average precision, Hits@50 and MRR weighted by its "
         "test positive edges (not all clients' pairs ranked together: docs/task-levels.md), at "
         "the evaluated round of highest client-mean validation AUC (max_val_auc), mean ± std "
         "over seeds. Hits@50 and MRR rank each positive among its own client's test "
         "negatives, so they depend on the client's size and do not compare the centralised "
         "row (one client, every negative) with the federated ones; a client with fewer than 50 "
         "test negatives counts every positive a hit, so Hits@50 is near 1 on small clients. "
         "No published "
         "numbers: graphfed's own table. 10 clients (Louvain or Metis), each splitting its "
         "edges 85/5/10, edges between clients left out; a 2-layer GCN encoder (32, 16), an "
         "inner-product decoder, one fresh negative per edge each epoch; Adam 0.01, 50 rounds "
         "× 2 local epochs, every 5th round evaluated. centralised: Local with one client "
         "holding the whole graph (the same run under both partitions).")

STANDARD = register(Preset(
    name="linkpred-standard",
    description="Link prediction on Cora, CiteSeer, Amazon-Photo and Coauthor-CS under "
                "Louvain and Metis clients (K = 10): pooled test AUC, AP, Hits@50 and MRR of "
                "every method that declares the edge level, beside a centralised and a Local "
                "row (graphfed's own table, no paper numbers)",
    variants=[CENTRALISED, *(Variant(m, m) for m in declared_methods("edge", "classification",
                                                                      FIRST))],
    datasets=[f"{d}/partition={p}" for d in DATASETS for p in PARTITIONS],
    metrics=METRICS, base=PROTOCOL, seeds=3, quick=QUICK, quick_seeds=1, select=RULE,
    setting_keys=SETTING_KEYS, table_label=value_label(SETTING_KEYS), notes=NOTES,
    cost="a 50-round FedAvg seed run on Cora (10 clients) under a minute on 2 CPU cores; "
         "Coauthor-CS and Amazon-Photo several times that"))
