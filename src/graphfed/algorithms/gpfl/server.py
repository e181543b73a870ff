"""GPFL's server: it keeps every client's personalised model θ_i (it knows the initial model
and every update), learns the round's client network and aggregates the updates along it.

Round t, after the clients' local epochs (spec §7.2.2, ``gpfl/train.py:process_gpfl``):
1. θ̂_i = θ_i + Δθ_i; client features X_C from them (Eq. 8) and A_E from the uploaded
   functional embeddings;
2. the initial network: in the first round A_0, from the property selector against A_E (Eqs.
   10-12) or uniform at random; later A_t = relu(β A_(t-1) + (1-β) A_E) (Eq. 9); normalised
   and remembered;
3. the GAE on (X_C, A_t) gives the discrete network N̂ (Eqs. 5-7, 6), or N̂ = A_t without it;
4. θ_i <- θ_i + Σ_j W_ij Δθ_j with W = (1-g) I + g N̂ (Eqs. 2 and 4, g = ``network_weight``).

Each client is then sent its own new θ_i (fit and evaluate messages alike), so what is
evaluated after round t is the post-aggregation model it trains from in round t+1.

A client whose reply was dropped keeps its θ_i (its training that round is lost) and the round's
network is learned over the clients that answered: their block of A_(t-1) is updated and
normalised again; with every client answering this is exactly the code's round.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from graphfed.algorithms.gpfl.gae import learn_scores
from graphfed.algorithms.gpfl.network import (
    client_features,
    discretize,
    embedding_similarity,
    inter_client_edges,
    normalize_network,
    property_similarity,
    select_properties,
    updated_network,
)
from graphfed.algorithms.gpfl.options import EMBEDDING, PROPERTY_VECTOR, UPDATE, GPFLOptions
from graphfed.data.properties import PROPERTIES
from graphfed.mechanisms.client_network import mix, stack
from graphfed.mechanisms.updates import under_prefix
from graphfed.messages import Message, MessageError, ScalarSpec, TensorSpec, fit_scalars
from graphfed.protocol import Server, Setup

NETWORK_DECIMALS = 4  # the recorded network, rounded: small enough to keep every round
# bounds of the per-graph properties whose range is known (density, closeness in [0, 1])
UNIT_PROPERTIES = [PROPERTIES.index("density"), PROPERTIES.index("closeness_centrality")]


class GPFLServer(Server):
    options: GPFLOptions
    state_keys = ("models", "properties", "selected", "network")

    def __init__(self, setup: Setup):
        super().__init__(setup)
        initial = {k: v.detach().clone() for k, v in setup.initial_params.items()}
        self.models: list[dict[str, Tensor]] = [initial] * setup.num_clients
        self.properties: Tensor | None = None  # clients x 6, from the setup exchange
        self.selected: list[int] | None = None  # the selector's properties (columns)
        self.network: Tensor | None = None  # A_(t-1), normalised (float64)
        self.last: dict = {}

    # ------------------------------------------------------------ setup: property vectors
    def configure_setup(self, clients: list[int]) -> dict[int, Message]:
        if self.options.initial_graph != "property":
            return {}
        return {c: Message() for c in clients}

    def setup_reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        return {PROPERTY_VECTOR: ((len(PROPERTIES),), torch.float32)}, {}

    def check_setup_reply(self, client: int, message: Message) -> None:
        """Mean properties a graph can have: density and closeness in [0, 1], degree >= 0."""
        p = message.tensors[PROPERTY_VECTOR]
        unit = p[UNIT_PROPERTIES]
        if (unit < 0).any() or (unit > 1).any() or p[PROPERTIES.index("average_degree")] < 0:
            raise MessageError(f"client {client}: property vector out of range ({p.tolist()})")

    def aggregate_setup(self, replies: dict[int, Message]) -> None:
        missing = sorted(set(range(self.setup.num_clients)) - set(replies))
        if missing:
            raise MessageError(f"GPFL's property-guided network needs every client's property "
                               f"vector; missing or malformed: clients {missing}")
        self.properties = torch.stack([replies[c].tensors[PROPERTY_VECTOR].double()
                                       for c in range(self.setup.num_clients)])

    # ------------------------------------------------------------ messages
    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        return {c: Message(dict(self.models[c])) for c in clients}

    configure_evaluate = configure_fit

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        spec = {UPDATE + k: (tuple(v.shape), v.dtype) for k, v in self.models[client].items()}
        spec[EMBEDDING] = ((self.options.random_graphs * self.setup.num_classes,),
                           torch.float32)
        return spec, fit_scalars()

    def check_reply(self, client: int, message: Message) -> None:
        """The embedding is R rows of log-probabilities over the classes."""
        rows = message.tensors[EMBEDDING].double().view(-1, self.setup.num_classes).exp()
        if not torch.allclose(rows.sum(1), torch.ones(len(rows), dtype=torch.float64),
                              atol=1e-4):
            raise MessageError(f"client {client}: the functional embedding is not "
                               "log-probabilities")

    # ------------------------------------------------------------ the round
    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        """Steps 1-4 of the module docstring over the clients that answered."""
        self.last = {}
        clients = sorted(replies)
        updates = [under_prefix(replies[c].tensors, UPDATE) for c in clients]
        trained = [{k: v + u[k] for k, v in self.models[c].items()}
                   for c, u in zip(clients, updates, strict=True)]
        o = self.options
        params = stack(trained)
        features = client_features(params, o.client_feature == "marginal",
                                   o.compress == "avgpool100")
        similarity = embedding_similarity(
            torch.stack([replies[c].tensors[EMBEDDING].double() for c in clients]))
        initial = self._initial_network(clients, similarity)
        network = self._learned_network(features, initial) if o.learn else initial
        weights = (1 - o.network_weight) * torch.eye(len(clients), dtype=torch.float64)
        steps = mix(updates, weights + o.network_weight * network)
        for c, step in zip(clients, steps, strict=True):
            self.models[c] = {k: v + step[k] for k, v in self.models[c].items()}
        self._record(clients, network, similarity)
        if o.record_similarity:
            self.last.update(self._feature_similarities(params))

    def _initial_network(self, clients: list[int], similarity: Tensor) -> Tensor:
        """A_t over ``clients``, normalised; the whole remembered network is updated."""
        o = self.options
        index = torch.tensor(clients)
        block = (index[:, None], index[None, :])
        if self.network is None:
            full = self._first_network(index, similarity)
        else:
            full = self.network.clone()
            if o.update:
                full[block] = updated_network(full[block], similarity, o.beta)
        self.network = normalize_network(full, o.init_norm)
        if len(clients) == self.setup.num_clients:
            return self.network
        return normalize_network(self.network[block], o.init_norm)

    def _first_network(self, index: Tensor, similarity: Tensor) -> Tensor:
        """A_0: property similarity over the selected properties (the selector compares the
        answering clients' with relu(A_E)), or U[0, 1] entries (the code's randomc)."""
        o = self.options
        k = self.setup.num_clients
        if o.initial_graph == "random":
            return torch.rand(k, k, dtype=torch.float64)
        assert self.properties is not None  # from the setup exchange, before round 1
        self.selected = select_properties(self.properties[index], similarity.clamp_min(0.0),
                                          o.property_standardize)
        return property_similarity(self.properties[:, self.selected], o.property_standardize)

    def _learned_network(self, features: Tensor, initial: Tensor) -> Tensor:
        o = self.options
        learned = learn_scores(features, initial, o.gae_hidden, o.gae_epochs, o.gae_lr,
                               o.gae_weight_decay, o.sparsity_weight)
        self.last["gae_loss"] = [learned.losses[0], learned.losses[-1]]
        return discretize(learned.scores.double(), o.discrete, o.threshold, o.keep_ratio)

    def _record(self, clients: list[int], network: Tensor, similarity: Tensor) -> None:
        """The round's network N̂ (rows: ``clients``), its inter-client edges M and the
        aggregation speed-up k²/(2M + k) of the paper's §3.4."""
        k = len(clients)
        edges = inter_client_edges(network)
        off = ~torch.eye(k, dtype=torch.bool)
        self.last.update(
            network=_rounded(network),
            edges=edges, aggregation_speedup=k * k / (2 * edges + k),
            embedding_similarity_abs=float(similarity[off].abs().mean()) if k > 1 else 0.0)
        if self.selected is not None:
            self.last["properties"] = [PROPERTIES[i] for i in self.selected]

    def _feature_similarities(self, params: Tensor) -> dict[str, list[list[float]]]:
        """Fig. 3: how alike the clients look through raw and through marginal parameters."""
        compress = self.options.compress == "avgpool100"
        return {f"{kind}_similarity": _rounded(features @ features.T) for kind, features in (
            ("raw", client_features(params, False, compress)),
            ("marginal", client_features(params, True, compress)))}

    def round_metrics(self) -> dict[str, Any]:
        return dict(self.last)


def _rounded(matrix: Tensor) -> list[list[float]]:
    """A recorded client x client matrix, rounded to ``NETWORK_DECIMALS``."""
    return [[round(float(w), NETWORK_DECIMALS) for w in row] for row in matrix]
