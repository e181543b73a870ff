"""FedStar (Tan et al., AAAI 2023): federated learning on non-IID graphs by sharing structure.

Every client runs a dual-channel GIN (``graphfed.models.structure``): a structure channel over
parameter-free structure encodings (random-walk landing probabilities and one-hot degree) and a
feature channel over the node features. Only the structure channel is federated, by a FedAvg
weighted by training-set size; the feature channel, the combining layer and the classifier stay
with each client. There is no global model.

At node level (FedSpray's baseline; our adaptation, as FedSpray does not say how it ran FedStar)
the same protocol federates the structure channel of ``DualChannelNodeGNN``: structure encodings
of each node computed on the client's own subgraph, the feature channel on the configured
backbone (``model.name``) and the classifier local.

Each round a client replaces its structure channel by the server's average, trains its whole
model for the local epochs, keeps the result and uploads its structure channel. The average of
round t reaches a client with its next message (fit of t+1 or an evaluate in between), as FedStar's
clients download it right after aggregation.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.algorithms.registry import AT_NODE_LEVEL, Algorithm, RunView, register
from graphfed.mechanisms.aggregation import weighted_average
from graphfed.messages import NUM_SAMPLES, Message, ScalarSpec, TensorSpec, fit_scalars, spec_of
from graphfed.models.structure import NODE_FEATURE_LAYERS, build_dual_channel, structure_names
from graphfed.protocol import AlgorithmOptions, ClientContext, Server, Setup
from graphfed.tensors import Params


class FedStarOptions(AlgorithmOptions):
    weighted: bool = Field(True, description="weight the structure channel by training-set size "
                                             "(False: uniform)")


def check_backbone(run: RunView) -> None:
    """At node level the feature channel is ``model.name``, one of ``NODE_FEATURE_LAYERS``."""
    if run.level == "node" and run.model.name not in NODE_FEATURE_LAYERS:
        raise ValueError(f"fedstar at node level takes model {', '.join(NODE_FEATURE_LAYERS)} "
                         f"for its feature channel, not {run.model.name!r}")


class FedStarServer(Server):
    """Holds the shared structure channel (float32); averages the clients' copies."""

    state_keys = ("shared", "last")
    options: FedStarOptions

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.names = structure_names(setup.initial_params)
        self.shared: Params = {k: setup.initial_params[k].detach().float().clone()
                               for k in self.names}
        self.last: dict = {}

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        message = Message(tensors=self.shared)
        return {c: message for c in clients}

    configure_evaluate = configure_fit

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        return spec_of(self.shared), fit_scalars()

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        if not replies:
            return
        clients = sorted(replies)
        weights = [float(replies[c].scalars[NUM_SAMPLES]) if self.options.weighted
                   else 1.0 for c in clients]
        self.shared = weighted_average([replies[c].tensors for c in clients], weights)
        total = sum(weights)
        self.last = {"clients": clients, "weights": [w / total for w in weights]}

    def round_metrics(self) -> dict[str, Any]:
        return self.last


class FedStarClient(PersonalClient):
    """Keeps its whole model; takes the structure channel from the server each round."""

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.names = structure_names(setup.initial_params)

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        if not message.tensors:
            return params
        return {k: message.tensors[k].to(v.dtype) if k in self.names else v
                for k, v in params.items()}

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        trained, stats = self.local_train(self.current(message, ctx), ctx)
        ctx.state["params"] = trained
        return self.reply({k: trained[k].float() for k in self.names}, ctx, stats)


FEDSTAR = register(Algorithm(
    "fedstar", FedStarServer, FedStarClient, FedStarOptions,
    family="personalized",
    paper="Tan et al., AAAI 2023 (FedStar)",
    levels=("graph", "node"),
    model=build_dual_channel,
    check=check_backbone,
    modes={"node": AT_NODE_LEVEL},
    description="FedAvg of a structure channel over random-walk and degree encodings; feature "
                "channel stays local"))
