"""FedProto (Tan et al., "FedProto: Federated Prototype Learning across Heterogeneous Clients",
AAAI 2022). Clients exchange class prototypes, never models: each keeps its own network, split
into an extractor f_i and a head (``models.prototype_net``), and uploads its local prototypes

    C_i^(j) = (1/|D_i,j|) sum_{(x, y) in D_i,j} f_i(x)                      (Eq. 4)

with its per-class sample counts; the server returns the global prototypes

    C^(j) = sum_i |D_i,j| C_i^(j) / sum_i |D_i,j|                           (Eq. 6)

(the count-weighted class means; Eq. 6 as printed carries a further 1/|N_j|, which would
shrink every prototype by the number of clients holding the class, so it is read as the
weighted mean), and each client trains on

    L = CE(head(f_i(x)), y) + lambda * R(f_i(x), C^(y))                     (Eq. 8)

over its samples whose class has a global prototype. A client is scored by the nearest global
prototype to its embedding (both authors' codes' inference; ``predict=head`` scores its own head).

Because only prototypes travel, clients may differ in model size: ``hidden_widths`` gives each
client the hidden width of its extractor (round-robin over client ids), the embedding width
(``embedding_dim``) being shared. A client whose width differs from ``model.hidden`` draws its
initial network from a seed fixed by the run's shared initial model (``prototype_net.sized``), so
every process draws the same one.

Secure aggregation (``secure_aggregation.enabled``). Eq. 6 needs only two sums per class, of
w_i^(j) C_i^(j) and of w_i^(j), with w_i^(j) = |D_i,j| (or, with ``weighted=false``, 1 where the
client holds the class): each sampled client answers with them scaled by 1 / n_max, n_max the
largest training count among the round's clients (public: the server knows the partition's
counts; 1 with ``weighted=false``), so every weight lies in [0, 1] and a weighted prototype's
entries within the prototype's. SecAgg+ reveals only the sums (``SumsFit``), quantised within
the configured clipping range (an entry beyond it is clipped, as an update is); the class
weights, multiples of 1 / n_max, are rounded back exactly. The server learns per class the
weighted prototype sum and the total count (or how many clients hold it), never one client's
prototypes or counts; the check that a client's counts sum to its training samples is
therefore not made.

Where the authors' code (``yuetan031/FedProto``, PFLlib ``clientproto.py``/``serverproto.py``)
differs from the paper, the paper is followed and the code is an option: the server mean is
unweighted over the clients holding a class (``weighted=false``), R is the mean squared error
(``distance=mse``), and local prototypes are averaged over the embeddings seen during training;
here they come from an evaluation pass with the trained model (Eq. 4). Prototypes are computed on
a client's training samples only.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

import torch
from pydantic import Field
from torch import Tensor, nn
from torch.func import functional_call

from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.algorithms.registry import Algorithm, RunView, register
from graphfed.mechanisms.prototypes import (
    Distance,
    class_prototypes,
    nearest_prototype_scores,
    prototype_distance,
    weighted_class_means,
)
from graphfed.messages import Message, MessageError, ScalarSpec, TensorSpec, fit_scalars
from graphfed.models.gnn import ModelOptions
from graphfed.models.prototype_net import WIDTH_FREE_LAYERS, PrototypeNet, params_seed
from graphfed.privacy.secure_aggregation import SumRequest
from graphfed.protocol import AlgorithmOptions, ClientContext, Server, Setup
from graphfed.tensors import Params
from graphfed.training import PreparedClient, TrainStats
from graphfed.training.batches import GraphBatch, NodeBatch
from graphfed.training.trainer import BatchLoss

PROTOTYPES = "prototypes"  # [C, d]: a client's local prototypes, or the global ones
COUNTS = "counts"  # [C]: a client's training samples per class
KNOWN = "known"  # [C] 0/1: which classes have a global prototype
SCALE = "fedproto_scale"  # under secure aggregation: n_max, what each client divides its sums by
INITIAL = "fedproto_initial"  # ctx.cache: the client's initial model at its own width
HEAD_WEIGHT = "head.weight"


class PrototypeOptions(AlgorithmOptions):
    """What FedProto and FedTGP share: the local regulariser, inference and model sizes."""

    lam: float = Field(1.0, ge=0.0, description="lambda, the weight of the prototype "
                       "regulariser (Eq. 8; FedProto's code --ld and FedTGP's --lamda: 1)")
    distance: Distance = Field(
        "l2", description="R: l2, the Euclidean distance of each embedding to its class's "
        "global prototype (the papers' phi); mse, the mean squared error over the dimensions "
        "(both authors' codes, nn.MSELoss)")
    predict: Literal["prototype", "head"] = Field(
        "prototype", description="a client's prediction: the nearest global prototype to its "
        "embedding (both authors' codes' test) or its own head's logits")
    embedding_dim: int | None = Field(
        None, ge=1, description="width of the shared embedding (the prototypes); unset: "
        "model.hidden (FedTGP's image code: 512)")
    hidden_widths: list[int] = Field(
        default_factory=list, description="hidden width of each client's extractor, assigned "
        "round-robin (client i gets hidden_widths[i % len]); empty: model.hidden for all. "
        "Clients of different sizes federate because only prototypes travel")


class FedProtoOptions(PrototypeOptions):
    weighted: bool = Field(True, description="global prototypes weighted by the clients' class "
                           "counts (paper Eq. 6) or the unweighted mean over the clients holding "
                           "the class (authors' code, proto_aggregation)")


def prototype_model(level: str, in_dim: int, num_classes: int, model: ModelOptions,
                    options: AlgorithmOptions) -> PrototypeNet:
    """The split network of width ``model.hidden`` (the shared initial model's)."""
    width = getattr(options, "embedding_dim", None) or model.hidden
    return PrototypeNet(level, in_dim, num_classes, model, width)


def check_prototype_run(config: RunView) -> None:
    """Refuse a layer type whose forward pass reads a width from the module (so it cannot run
    clients of another size) and a width list with a zero in it, in one line."""
    allowed = WIDTH_FREE_LAYERS.get(config.level, ())
    if config.model.name not in allowed:
        raise ValueError(f"model={config.model.name}: prototype methods run "
                         f"{', '.join(allowed)} at {config.level} level")
    options = config.algorithm_options()
    if not isinstance(options, PrototypeOptions):
        raise TypeError(f"{type(options).__name__} are not a prototype method's options")
    if any(w < 1 for w in options.hidden_widths):
        raise ValueError("hidden_widths must be positive integers")


def embeddings(params: Params, ctx: ClientContext, data: PreparedClient,
               splits: tuple[str, ...]) -> dict[str, tuple[Tensor, Tensor]]:
    """(embeddings, labels) of ``data``'s samples of each split under ``params``, in
    evaluation mode (the model's embedding output in place of its logits)."""
    model = ctx.trainer.model
    model.eval()

    def call(m: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any] | None = None
             ) -> Tensor:
        return functional_call(m, params, args, {"with_embedding": True})[1]

    with torch.no_grad():
        return data.outputs(model, call, splits)


class FedProtoServer(Server):
    """Keeps the global prototypes and which classes have one."""

    state_keys: ClassVar[tuple[str, ...]] = ("prototypes", "known")

    def __init__(self, setup: Setup):
        super().__init__(setup)
        dim = setup.initial_params[HEAD_WEIGHT].shape[1]
        self.prototypes = torch.zeros(setup.num_classes, dim)
        self.known = torch.zeros(setup.num_classes)
        self.scale = 1  # the secure round's n_max, from its request to its sum

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        message = Message(tensors={PROTOTYPES: self.prototypes, KNOWN: self.known})
        return {c: message for c in clients}

    configure_evaluate = configure_fit

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        c, d = self.prototypes.shape
        return {PROTOTYPES: ((c, d), torch.float32), COUNTS: ((c,), torch.int64)}, fit_scalars()

    def check_reply(self, client: int, message: Message) -> None:
        """Counts are non-negative and sum to the client's training samples as the partition
        made them (where the server knows them): no client weighs a class up by claiming it."""
        counts = message.tensors[COUNTS]
        if counts.min() < 0:
            raise MessageError(f"client {client}: negative class count")
        sizes = self.setup.client_sizes
        if sizes and int(counts.sum()) != sizes[client].train:
            raise MessageError(f"client {client}: class counts sum to {int(counts.sum())}, "
                               f"not its {sizes[client].train} training samples")

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        """Eq. 6 over the replies; a class no reply holds keeps its prototype."""
        if not replies:
            return
        held = [replies[c] for c in sorted(replies)]
        self.take(*weighted_class_means([m.tensors[PROTOTYPES] for m in held],
                                        [m.tensors[COUNTS] for m in held], self.weighted))

    @property
    def weighted(self) -> bool:
        return getattr(self.setup.options, "weighted", True)

    def take(self, means: Tensor, present: Tensor) -> None:
        """The round's class means for the classes ``present``; the others keep theirs."""
        self.prototypes = torch.where(present.view(-1, 1), means, self.prototypes)
        self.known = torch.maximum(self.known, present.float())

    def configure_fit_sum(self, rnd: int, clients: list[int]) -> SumRequest:
        """Under secure aggregation: the prototypes, and n_max for the clients to scale by."""
        scale = max(self.setup.client_sizes[c].train for c in clients) if self.weighted else 1
        message = Message(self.configure_fit(rnd, clients)[clients[0]].tensors, {SCALE: scale})
        options = self.setup.secure_aggregation
        if options is None:
            raise RuntimeError("a secure sum is asked for under secure_aggregation only")
        self.scale = scale
        return SumRequest({c: message for c in clients},
                          {PROTOTYPES: tuple(self.prototypes.shape),
                           COUNTS: (self.prototypes.shape[0],)}, options.clipping_range)

    def aggregate_fit_sum(self, rnd: int, total: Params, contributors: list[int]) -> None:
        """Eq. 6 from the sums alone; the class weights, multiples of 1 / n_max, rounded."""
        weight = (total[COUNTS] * self.scale).round()
        means = total[PROTOTYPES] * self.scale / weight.clamp_min(1).view(-1, 1)
        self.take(means.float(), weight > 0)


class FedProtoClient(PersonalClient):
    """Trains its own network (of its own width) with the prototype regulariser; uploads its
    class prototypes and counts."""

    options: PrototypeOptions  # FedProto's or FedTGP's

    def own_params(self, ctx: ClientContext) -> Params:
        if "params" in ctx.state:
            return ctx.state["params"]
        if INITIAL not in ctx.cache:
            ctx.cache[INITIAL] = self.initial_params(ctx)
        return ctx.cache[INITIAL]

    def initial_params(self, ctx: ClientContext) -> Params:
        """The shared initial model, or at another width one drawn from a seed the shared one
        fixes (the same for every client of that width)."""
        widths = self.options.hidden_widths
        model = ctx.trainer.model
        if not isinstance(model, PrototypeNet):
            raise TypeError(f"{type(self).__name__} trains a PrototypeNet")
        width = widths[ctx.client_id % len(widths)] if widths else model.opts.hidden
        if width == model.opts.hidden:
            return self.setup.initial_params
        seed = params_seed(self.setup.initial_params, width)
        return {k: v.to(ctx.trainer.device) for k, v in model.sized(width, seed).items()}

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        return params  # what the server sends is read by the loss and the prediction

    def regulariser(self, message: Message) -> BatchLoss:
        """lambda * R(f(x), C^(y)) on the batch's samples whose class has a global prototype
        (the trainer's ``batch_loss``)."""
        prototypes, known = message.tensors[PROTOTYPES], message.tensors[KNOWN] > 0
        lam, distance = self.options.lam, self.options.distance

        def loss(live: Params, batch: NodeBatch | GraphBatch, embedding: Tensor) -> Tensor:
            targets = batch.targets
            keep = known[targets]
            if not bool(keep.any()):
                return embedding.new_zeros(())
            return lam * prototype_distance(embedding[keep], prototypes[targets[keep]],
                                            distance)

        return loss

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        params, stats = self.local_train(self.own_params(ctx), ctx,
                                         batch_loss=self.regulariser(message))
        reply = self.keep(ctx, params, stats)
        return reply if SCALE not in message.scalars else self.summand(reply,
                                                                       message.scalars[SCALE])

    def summand(self, reply: Message, scale: float) -> Message:
        """Under secure aggregation: the class weights over ``scale`` and the prototypes
        weighted by them, the two sums Eq. 6 needs."""
        counts = reply.tensors[COUNTS]
        weight = counts.double() if getattr(self.options, "weighted", True) else (
            counts > 0).double()
        weight = weight / float(scale)
        return Message({PROTOTYPES: weight.view(-1, 1) * reply.tensors[PROTOTYPES].double(),
                        COUNTS: weight}, reply.scalars)

    def keep(self, ctx: ClientContext, trained: Params, stats: TrainStats) -> Message:
        """Keep the trained network; upload its class prototypes (Eq. 4) and counts."""
        ctx.state["params"] = trained
        embedding, labels = embeddings(trained, ctx, ctx.data, ("train",))["train"]
        prototypes, counts = class_prototypes(embedding, labels, self.setup.num_classes)
        return self.reply({PROTOTYPES: prototypes.float(), COUNTS: counts.long()}, ctx, stats)

    def evaluate(self, message: Message, ctx: ClientContext) -> dict[str, dict]:
        """The client's network scored by its head, or by the nearest global prototype once
        the server has any."""
        params = self.own_params(ctx)
        known = message.tensors[KNOWN] > 0
        if self.options.predict == "head" or not bool(known.any()):
            return self.evaluate_params(params, ctx)
        prototypes = message.tensors[PROTOTYPES]

        def scored(data: PreparedClient, splits: tuple[str, ...]) -> dict[str, dict]:
            outputs = {s: (nearest_prototype_scores(h, prototypes, known), y)
                       for s, (h, y) in embeddings(params, ctx, data, splits).items()}
            return ctx.trainer.split_metrics(outputs, data)

        metrics = scored(ctx.data, ctx.trainer.own_splits)
        if ctx.global_test is not None:
            metrics["global"] = scored(ctx.global_test, ("test",))["test"]
        return metrics

FEDPROTO = register(Algorithm(
    "fedproto", FedProtoServer, FedProtoClient, FedProtoOptions,
    family="personalized",
    paper="Tan et al., AAAI 2022 (FedProto)",
    levels=("node", "graph"),
    model=prototype_model,
    check=check_prototype_run,
    modes={"graph": ("dataset=MUTAG", "partition=dirichlet", "model=gin"),
           "two-sizes": ("fedproto.hidden_widths=[16,32]",)},
    description="clients of any model size exchange class prototypes; the server returns "
                "their count-weighted means, which regularise local training"))
