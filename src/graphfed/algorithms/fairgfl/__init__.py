"""FairGFL (Zhou, Yang, Zhao, Ren, "FairGFL: Privacy-preserving fairness-aware federated
learning with overlapping subgraphs", arXiv 2512.23235, IEEE TPDS): node classification on
clients whose subgraphs overlap, where clients holding many shared nodes would otherwise
dominate the objective.

Each round every client uploads, beside its model, an LDP-sanitised mini-batch of its subgraph;
the server estimates from those how much each client overlaps the others, weighs the clients
down as their overlap grows (Eqs. 24-25) and takes a step towards the worst-off client's model
(Eq. 27). Spec: ``shared/specs/fairgfl.md`` (§7 where it differs from §1-§6). No authors' code
exists: every value or formula the paper lost is an option (``options.py``) whose default §7.5
recommends. ``client.py`` privatises, ``server.py`` estimates and aggregates; the mechanisms are
``mechanisms/privacy.py`` and ``mechanisms/overlap.py``.
"""

from __future__ import annotations

from graphfed.algorithms.fairgfl.client import FairGFLClient
from graphfed.algorithms.fairgfl.options import FairGFLOptions
from graphfed.algorithms.fairgfl.server import FairGFLServer, server_inputs
from graphfed.algorithms.registry import Algorithm, register

FAIRGFL = register(Algorithm(
    "fairgfl", FairGFLServer, FairGFLClient, FairGFLOptions,
    family="averaging",
    paper="Zhou et al., FairGFL, IEEE TPDS (arXiv 2512.23235)",
    levels=("node",),
    server_inputs=server_inputs,
    # the server's public node pool, which only its partition holds out; a short encoder
    small_run=("partition=fairgfl_overlap", "fairgfl.encoder_epochs=5"),
    description="overlap-aware fair aggregation from LDP-sanitised mini-batches, plus a "
                "max-loss step"))
