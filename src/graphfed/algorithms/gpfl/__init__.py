"""GPFL ("Graph Personalized Federated Learning via Client Network Learning"; code
Jiachen2cc/Graph-Personalized-Federated-Learning): graph-level personalised FL that aggregates
the clients' updates along a client network the server learns every round.

Every client keeps its own GIN (all of it personalised). The network starts from the similarity
of the clients' mean graph properties, pruned by a rule-based selector (Eqs. 10-12), is refreshed
every round by the similarity of the clients' outputs on fixed random graphs (Eq. 9), and is
refined by a graph auto-encoder over the clients' marginal parameters (Eqs. 5-8) into a
discrete network N̂; client i's update becomes (1-g) Δθ_i + g Σ_j N̂_ij Δθ_j (Eqs. 2, 4). Spec:
``shared/specs/gpfl.md`` (§7 where it differs from §1-§6). ``client.py`` uploads the update and
the functional embedding, ``server.py`` runs the round, ``network.py`` and ``gae.py`` hold its
equations.
"""

from __future__ import annotations

from graphfed.algorithms.gpfl.client import GPFLClient
from graphfed.algorithms.gpfl.options import GPFLOptions, refuse_partial_participation
from graphfed.algorithms.gpfl.server import GPFLServer
from graphfed.algorithms.registry import Algorithm, register

GPFL = register(Algorithm(
    "gpfl", GPFLServer, GPFLClient, GPFLOptions,
    family="personalized",
    paper="GPFL, graph personalized FL via client network learning (code: Jiachen2cc)",
    levels=("graph",),
    check=refuse_partial_participation,
    description="updates aggregated along a learned client network (property-guided initial "
                "network, functional-embedding refresh, server GAE on marginal parameters)"))
