"""FedTAD (Zhu, Li, Wu, Wu, Hu, Li, "FedTAD: Topology-aware Data-free Knowledge Distillation
for Subgraph Federated Learning", IJCAI 2024).

Clients train as in FedAvg and send, with their model, how reliable their knowledge of each
class is: the class-wise knowledge reliability CKR (``reliability``, Section 4.1), measured once
on the subgraph from topology-aware node embeddings. The server averages the models, then
corrects the average by data-free distillation (``distillation``, Section 4.2): a generator
synthesises a pseudo graph on which the global model learns to match each client's model,
every class weighted by that client's normalised reliability. The server holds the clients'
models (it receives them under FedAvg) and the run's network, so it runs on a real server.

Bytes: each round a client uploads its model and C reliabilities, and receives the global
model.
"""

from __future__ import annotations

from graphfed.algorithms.averaging.fedtad.client import FedTADClient
from graphfed.algorithms.averaging.fedtad.options import FedTADOptions
from graphfed.algorithms.averaging.fedtad.server import FedTADServer, server_inputs
from graphfed.algorithms.registry import Algorithm, register

FEDTAD = register(Algorithm(
    "fedtad", FedTADServer, FedTADClient, FedTADOptions,
    family="averaging",
    paper="Zhu et al., IJCAI 2024 (FedTAD)",
    levels=("node",),
    batched=True,
    server_inputs=server_inputs,
    description="FedAvg, then data-free distillation of the clients' models into the global "
                "one on generated pseudo graphs, each class weighted by the client's "
                "topology-aware reliability"))
