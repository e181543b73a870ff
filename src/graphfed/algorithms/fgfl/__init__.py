"""FGFL (Pan et al., "Towards Fair Graph Federated Learning via Incentive Mechanisms", AAAI 2024).

On top of the gradient-reward protocol (``algorithms.rewards.base``): an agent's value adds up its
gradient alignment and its graph diversity (share of the global motif vocabulary, Eq. 10); the
value pays a per-round payoff with punishment and delayed-contribution compensation (Eqs. 5-7);
and motif prototypes (mean graph embedding over the graphs containing a motif, Eq. 11), averaged
by value on the server (Eq. 12), regularise local training (Eq. 14). Motif vocabularies travel
once, in the setup exchange before round 1. Spec: ``shared/specs/fgfl.md``.

Node level. FairGFL (Zhou et al., TPDS 2025) compares against FGFL on node classification
(spec ``fairgfl.md`` §7.4, §7.5 F9). Motifs are rings and bonds counted over a client's many
graphs; a node-level client holds one graph, so there is no motif vocabulary, no diversity term
and no prototype. Node-level FGFL keeps the gradient-cosine valuation (Eq. 10 with alpha2 = 0),
the value-weighted aggregate (Eq. 13), the sparsified rewards (Eq. 4) and the payoff (Eqs. 5-7),
has no setup exchange, and refuses ``use_diversity=true`` or ``use_prototypes=true``.

Round t of the spec (§3.4) in the code: agents train with the prototype term and upload their
normalised update and local prototypes (steps 2-3: ``RewardClient.fit``,
``FGFLClient.batch_loss``/``upload``); the server weighs the agents by value (Eq. 13,
``FGFLServer.aggregation_weights``), aggregates, measures alignment (Eq. 9) and revalues
(Eq. 10, ``revalue``), sizes and sparsifies the rewards (Eq. 4; steps 4-9:
``RewardServer.aggregate_fit``), then pays (Eqs. 5-7) and aggregates prototypes (Eq. 12;
steps 10-11: ``FGFLServer.after_aggregate``).
"""

from __future__ import annotations

from graphfed.algorithms.averaging.leave_one_out import server_inputs
from graphfed.algorithms.fgfl.client import FGFLClient
from graphfed.algorithms.fgfl.options import FGFLOptions, check_fgfl
from graphfed.algorithms.fgfl.server import FGFLServer
from graphfed.algorithms.registry import AT_NODE_LEVEL, Algorithm, register

FGFL = register(Algorithm(
    "fgfl", FGFLServer, FGFLClient, FGFLOptions,
    family="rewards",
    paper="Pan et al., AAAI 2024 (FGFL)",
    levels=("graph", "node"),
    description="FGFL: valued agents, sparsified rewards, payoffs and motif prototypes "
                "(node level: without motifs)",
    check=check_fgfl,
    server_inputs=server_inputs,
    modes={"node": AT_NODE_LEVEL}))
