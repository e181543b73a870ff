"""The server side of graph-based personalised FL: each round it weighs every pair of clients
that replied (a row-stochastic matrix W inferred from their trained models, or from what else
they upload) and sends client i what it mixes from the others' models by row i
(``mechanisms.client_network``). FedAMP, pFedGraph and FED-PUB differ in how they infer W and in
what they send, not in this round.

What a client is sent waits for it in ``outbox`` until its next message (the pending-update
pattern of ``PersonalClient``); a client that did not reply keeps what it was last given. W is
inferred among the clients that replied this round, as pFedGraph's code and PFLlib's FedAMP do
with partial participation (GPFL's code trains every client every round).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar

import torch
from torch import Tensor

from graphfed.mechanisms.client_network import stack
from graphfed.messages import NUM_SAMPLES, Message, ScalarSpec, TensorSpec, fit_scalars, spec_of
from graphfed.protocol import Server, Setup
from graphfed.tensors import Params


class NetworkServer(Server):
    """Holds each client's pending message and the last round's weights (for the metrics)."""

    state_keys: ClassVar[tuple[str, ...]] = ("outbox", "last")

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.names = list(setup.initial_params)
        self.initial = stack([setup.initial_params])[0]
        self.outbox: dict[int, dict[str, Tensor]] = {}
        self.last: dict = {}

    @abstractmethod
    def network(self, clients: list[int], models: list[Params], sizes: Tensor,
                replies: list[Message]) -> Tensor:
        """``[K, K]`` weights W among ``clients``, from their trained ``models`` and training
        sizes (``NUM_SAMPLES``, which the runtime sets from the partition); ``replies`` holds
        anything else they uploaded (FED-PUB's functional embeddings)."""

    @abstractmethod
    def messages(self, models: list[Params], weights: Tensor) -> list[dict[str, Tensor]]:
        """What each of the K clients is sent, given the models and W."""

    def updates(self, models: list[Params]) -> Tensor:
        """``[K, P]`` float64: each model minus the initial global model (Δθ in both methods'
        code, which keeps the round-0 model as the reference)."""
        return stack(models, self.names) - self.initial

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        return {c: Message(dict(self.outbox.get(c, {}))) for c in clients}

    def reply_spec(self, client: int) -> tuple[TensorSpec, ScalarSpec]:
        return spec_of(self.setup.initial_params), fit_scalars()

    def collect(self, replies: dict[int, Message]) -> tuple[list[int], list[Params], Tensor]:
        """The clients that replied (sorted), their models and their training sizes."""
        clients = sorted(replies)
        models = [{k: replies[c].tensors[k] for k in self.names} for c in clients]
        sizes = torch.tensor([float(replies[c].scalars[NUM_SAMPLES]) for c in clients],
                             dtype=torch.float64)
        return clients, models, sizes

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        if not replies:
            return
        clients, models, sizes = self.collect(replies)
        weights = self.network(clients, models, sizes, [replies[c] for c in clients])
        self.outbox.update(zip(clients, self.messages(models, weights), strict=True))
        self.last = {"clients": clients, "weights": weights.tolist()}

    def round_metrics(self) -> dict[str, Any]:
        return self.last
