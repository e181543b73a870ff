"""FedSage+ (Zhang, Yang, Liu, Cheng, Wang, Yiu, NeurIPS 2021) as a FedEgo baseline: FedSage (FedAvg
of a GraphSAGE classifier) on local graphs mended by NeighGen, a generator of missing neighbours
trained federatedly.

Mechanism (paper §4, FederatedScope's ``fedsageplus``):

* impairment: each client hides a random ``hide_portion`` of its nodes (``int(portion * n)``). For
  every kept node the targets are the number of its in-neighbours that were hidden and the
  features of (the first ``num_pred`` of) those hidden neighbours.
* NeighGen: a 2-layer GraphSAGE encoder on the impaired graph; dGen, Linear + ReLU, predicts the
  missing-neighbour count (smooth-L1 against the true count); fGen, an MLP ending in tanh on the
  encoding plus Gaussian noise, generates ``num_pred`` feature vectors per node (greedy matching
  loss: each generated vector against the closest true missing neighbour, mean squared error);
  and, as in FederatedScope, a GraphSAGE classifier on the impaired graph mended by the
  generator's own output (cross-entropy on the kept training nodes), so generated features are
  also pushed to help classification. Loss: ``num_weight * L_d + feat_weight * L_f +
  clf_weight * L_c``.
* federated generator training: ``gen_rounds`` rounds of FedAvg over all NeighGen parameters,
  ``gen_local_steps`` full-graph Adam steps per client per round.
* mending: with the final generator, each client runs NeighGen on its whole local graph and
  appends, for every node, ``round(predicted count)`` clipped to ``[0, num_pred]`` generated
  nodes with generated features and an edge in each direction to that node only. Original nodes
  come first, unchanged (features, labels, masks); generated nodes carry label -1 and are in no
  split. The classifier (FedSage's GraphSAGE, ``sage_backbone``: config ``model`` with SAGE
  layers) then trains with FedAvg on the mended graph, and local val/test nodes are evaluated on
  it. The global test graph (``client_global_eval``) is evaluated unmended: it is the whole
  graph, with no missing neighbours to generate.

How the phases map onto graphfed's protocol (everything crossing is a ``Message``, so bytes count):
generator round 1 is the one-off setup exchange (round 0: each client initialises NeighGen from
the fixed ``gen_seed``, so all start identical, trains it and uploads it; the server averages).
Generator rounds 2..``gen_rounds`` ride on fit rounds 1..``gen_rounds - 1``: the fit message
carries the classifier and the averaged generator, the reply both trained. Fit round
``gen_rounds`` carries the final generator; the client mends its graph with it before training
(and again in a later round if it was not sampled then). The runtime has a single setup exchange,
so with ``gen_rounds > 1`` the classifier already trains, on the unmended graph, during fit rounds
1..``gen_rounds - 1`` (``classifier_during_gen = false`` instead returns it untouched there,
which spends those rounds on the generator alone); the paper trains the classifier only after.

Simplified versus the paper: the cross-client fGen loss (a client's generator scored against
other clients' hidden neighbours, via gradients relayed by the server) is replaced by FedAvg of
the generator; fGen has the hidden sizes ``fgen_hidden``; noise is added only while training
(mending is deterministic); ``num_pred`` true neighbours are the lowest-index hidden ones; the
greedy loss covers the first ``min(num_pred, true count)`` generated slots (FederatedScope uses
the predicted count); the generator's optimiser settings are a reconstruction.
"""

from __future__ import annotations

from graphfed.algorithms.averaging.fedsage import sage_backbone
from graphfed.algorithms.averaging.fedsage_plus.client import FedSagePlusClient
from graphfed.algorithms.averaging.fedsage_plus.options import FedSagePlusOptions
from graphfed.algorithms.averaging.fedsage_plus.server import FedSagePlusServer
from graphfed.algorithms.registry import Algorithm, register

FEDSAGE_PLUS = register(Algorithm(
    "fedsage+", FedSagePlusServer, FedSagePlusClient, FedSagePlusOptions,
    family="averaging",
    paper="Zhang et al., NeurIPS 2021 (FedSage+)",
    levels=("node",),
    model=sage_backbone,
    # a smaller generator and fewer of its rounds keep a two-round test run at a few seconds
    small_run=("fedsage+.fgen_hidden=[32]", "fedsage+.gen_rounds=2"),
    description="FedSage on local graphs mended by NeighGen, a federatedly trained generator of "
                "missing neighbours (counts and features)"))
