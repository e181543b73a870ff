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

from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn
from torch_geometric.data import Data
from torch_geometric.nn import SAGEConv

from graphfed.algorithms.aggregation import weighted_average
from graphfed.algorithms.base import Algorithm, Message, register, spec_of
from graphfed.algorithms.fedavg import FedAvgClient, FedAvgOptions, FedAvgServer
from graphfed.algorithms.fedsage import sage_backbone
from graphfed.algorithms.updates import under_prefix, with_prefix
from graphfed.data.federated import SPLITS, NodeClient
from graphfed.training.batches import PreparedNodeClient

GEN = "gen."  # prefix of the generator's tensors in a message
TRAIN_GEN = "fedsage+_train_gen"  # scalar: the client trains the received generator
MENDED = "fedsage+_mended"  # reply scalar: the client has mended its graph
IMPAIRED = "fedsage+_impaired"
MENDED_GRAPH, MENDED_DATA = "fedsage+_mended_graph", "fedsage+_mended_data"


class FedSagePlusOptions(FedAvgOptions):
    hide_portion: float = Field(0.5, ge=0.0, lt=1.0, description="share of a client's nodes "
                                "hidden to make the impaired graph NeighGen learns from")
    num_pred: int = Field(5, ge=1, description="generated neighbours per node at most (fGen "
                          "outputs this many feature vectors)")
    gen_rounds: int = Field(20, ge=0, description="federated rounds of NeighGen training "
                            "(FedEgo: 20; 0: no generator, plain FedSage)")
    gen_local_steps: int = Field(2, ge=1, description="local NeighGen epochs (full-graph "
                                 "steps) per generator round (FedEgo's 20 x 2)")
    gen_hidden: int = Field(128, ge=1, description="NeighGen encoder / latent size and its "
                            "internal classifier's hidden size (FederatedScope: 128)")
    fgen_hidden: list[int] = Field([256, 2048], description="fGen's hidden layer sizes "
                                   "(FederatedScope: 256, 2048)")
    gen_dropout: float = Field(0.5, ge=0.0, lt=1.0, description="dropout in NeighGen")
    gen_noise: float = Field(1.0, ge=0.0, description="std of the Gaussian noise added to the "
                             "latent before fGen while training")
    gen_lr: float = Field(0.01, gt=0.0, description="Adam learning rate of NeighGen")
    gen_weight_decay: float = Field(5e-4, ge=0.0, description="Adam weight decay of NeighGen")
    num_weight: float = Field(1.0, ge=0.0, description="weight of dGen's count loss (a)")
    feat_weight: float = Field(1.0, ge=0.0, description="weight of fGen's greedy feature loss (b)")
    clf_weight: float = Field(1.0, ge=0.0, description="weight of the classification loss on "
                              "the generator-mended impaired graph (c)")
    gen_seed: int = Field(0, description="seed of NeighGen's initialisation, shared by all "
                          "clients so that their generators start identical")
    classifier_during_gen: bool = Field(True, description="train the classifier (on the "
                                        "unmended graph) in the fit rounds that also carry "
                                        "generator training; false: leave it untouched there")


# ---------------------------------------------------------------- impairment and mending

@dataclass
class Impaired:
    """A client's graph with some nodes hidden, and what NeighGen must recover per kept node."""

    keep: Tensor  # original ids of the kept nodes, ascending
    hidden: Tensor  # original ids of the hidden nodes
    x: Tensor
    edge_index: Tensor  # among kept nodes, relabelled 0..len(keep)-1
    y: Tensor
    train: Tensor  # bool over kept nodes: labelled training nodes
    missing_count: Tensor  # float per kept node: its in-neighbours that were hidden
    missing_x: Tensor  # [kept, num_pred, F]: features of (the first num_pred of) them
    missing_mask: Tensor  # [kept, num_pred] bool: which slots of missing_x are real

    def to(self, device) -> Impaired:
        return Impaired(*(getattr(self, f).to(device) for f in self.__dataclass_fields__))


def hide_nodes(graph: Data, portion: float, num_pred: int,
               generator: torch.Generator | None = None) -> Impaired:
    """Hide ``int(portion * n)`` random nodes of ``graph`` and collect the recovery targets."""
    n = graph.num_nodes
    order = torch.randperm(n, generator=generator)
    hidden = order[:int(portion * n)].sort().values
    is_hidden = torch.zeros(n, dtype=torch.bool)
    is_hidden[hidden] = True
    keep = torch.nonzero(~is_hidden).view(-1)
    new_id = torch.full((n,), -1, dtype=torch.long)
    new_id[keep] = torch.arange(len(keep))
    source, target = graph.edge_index.cpu()
    inside = ~is_hidden[source] & ~is_hidden[target]
    edge_index = new_id[graph.edge_index.cpu()[:, inside]]
    lost = is_hidden[source] & ~is_hidden[target]  # a hidden in-neighbour of a kept node
    lost_source, lost_target = source[lost], new_id[target[lost]]
    missing_count = torch.zeros(len(keep)).index_add_(0, lost_target,
                                                      torch.ones(len(lost_target)))
    x = graph.x.cpu().float()
    missing_x = torch.zeros(len(keep), num_pred, x.size(1))
    missing_mask = torch.zeros(len(keep), num_pred, dtype=torch.bool)
    if len(lost_target):
        # slot of each lost edge among its target's lost edges, ordered by source id
        key = lost_target * n + lost_source
        perm = torch.argsort(key)
        lost_source, lost_target = lost_source[perm], lost_target[perm]
        first = torch.searchsorted(lost_target, lost_target)
        slot = torch.arange(len(lost_target)) - first
        fits = slot < num_pred
        missing_x[lost_target[fits], slot[fits]] = x[lost_source[fits]]
        missing_mask[lost_target[fits], slot[fits]] = True
    train = graph.train_mask.cpu()[keep] if hasattr(graph, "train_mask") else torch.zeros(
        len(keep), dtype=torch.bool)
    return Impaired(keep, hidden, x[keep], edge_index, graph.y.cpu()[keep], train,
                    missing_count, missing_x, missing_mask)


def mend(x: Tensor, edge_index: Tensor, counts: Tensor, generated: Tensor
         ) -> tuple[Tensor, Tensor, Tensor]:
    """Append ``counts[i]`` nodes with features ``generated[i, :counts[i]]`` to each node ``i``,
    linked to it in both directions. Returns features, edges and each new node's source node;
    original nodes keep their ids. Differentiable in ``generated``."""
    n, slots = generated.shape[:2]
    use = torch.arange(slots, device=counts.device).unsqueeze(0) < counts.unsqueeze(1)
    source = torch.arange(n, device=counts.device).unsqueeze(1).expand(n, slots)[use]
    new = torch.arange(len(source), device=counts.device) + n
    edges = torch.cat([edge_index, torch.stack([new, source]), torch.stack([source, new])], 1)
    return torch.cat([x, generated[use].to(x.dtype)]), edges, source


def mended_graph(graph: Data, counts: Tensor, generated: Tensor) -> Data:
    """``graph`` with the generated neighbours appended (label -1, in no split)."""
    x, edge_index, source = mend(graph.x.float(), graph.edge_index, counts, generated)
    added = len(source)
    out = Data(x=x, edge_index=edge_index, num_nodes=graph.num_nodes + added,
               y=torch.cat([graph.y, torch.full((added,), -1, dtype=graph.y.dtype)]))
    for s in SPLITS:
        mask = getattr(graph, f"{s}_mask")
        setattr(out, f"{s}_mask", torch.cat([mask, torch.zeros(added, dtype=torch.bool)]))
    out.generated_from = source
    return out


def greedy_feature_loss(generated: Tensor, true: Tensor, mask: Tensor) -> Tensor:
    """Mean over the first ``min(num_pred, true count)`` generated slots of each node of the
    squared error (mean over features) to the closest true missing neighbour."""
    valid = mask.any(1)
    if not bool(valid.any()):
        return generated.sum() * 0.0
    g, t, m = generated[valid], true[valid].to(generated.dtype), mask[valid]
    dist = ((g * g).sum(-1, keepdim=True) + (t * t).sum(-1).unsqueeze(1)
            - 2 * torch.bmm(g, t.transpose(1, 2))).clamp_min(0) / g.size(-1)
    closest = dist.masked_fill(~m.unsqueeze(1), float("inf")).min(2).values
    return (closest * m).sum() / m.sum()


# ---------------------------------------------------------------- NeighGen

class NeighGen(nn.Module):
    """Encoder (2 SAGE layers), dGen (count), fGen (features), and a SAGE classifier that is
    trained on the generator-mended impaired graph."""

    def __init__(self, in_dim: int, num_classes: int, options: FedSagePlusOptions):
        super().__init__()
        h = options.gen_hidden
        self.num_pred, self.dropout, self.noise = options.num_pred, options.gen_dropout, \
            options.gen_noise
        self.encoder = nn.ModuleList([SAGEConv(in_dim, h), SAGEConv(h, h)])
        self.dgen = nn.Linear(h, 1)
        dims = [h, *options.fgen_hidden, options.num_pred * in_dim]
        self.fgen = nn.ModuleList(nn.Linear(dims[i], dims[i + 1]) for i in range(len(dims) - 1))
        self.classifier = nn.ModuleList([SAGEConv(in_dim, h), SAGEConv(h, num_classes)])

    def forward(self, x: Tensor, edge_index: Tensor) -> tuple[Tensor, Tensor]:
        """Predicted missing counts [n] (>= 0) and generated features [n, num_pred, F]."""
        z = x
        for i, conv in enumerate(self.encoder):
            z = conv(F.dropout(z, self.dropout, self.training), edge_index)
            if i == 0:
                z = F.relu(z)
        counts = F.relu(self.dgen(z)).view(-1)
        if self.training and self.noise > 0:
            z = z + self.noise * torch.randn_like(z)
        f = z
        for i, layer in enumerate(self.fgen):
            if i == len(self.fgen) - 1:
                f = F.dropout(f, self.dropout, self.training)
            f = layer(f)
            f = torch.tanh(f) if i == len(self.fgen) - 1 else F.relu(f)
        return counts, f.view(len(x), self.num_pred, x.size(1))

    def classify(self, x: Tensor, edge_index: Tensor) -> Tensor:
        h = F.relu(self.classifier[0](F.dropout(x, self.dropout, self.training), edge_index))
        return self.classifier[1](F.dropout(h, self.dropout, self.training), edge_index)


def clip_counts(counts: Tensor, num_pred: int) -> Tensor:
    """Predicted counts as whole numbers of generated neighbours in ``[0, num_pred]``."""
    return counts.detach().round().clamp(0, num_pred).long()


def neighgen_loss(model: NeighGen, data: Impaired, options: FedSagePlusOptions) -> Tensor:
    counts, generated = model(data.x, data.edge_index)
    loss = options.num_weight * F.smooth_l1_loss(counts, data.missing_count)
    loss = loss + options.feat_weight * greedy_feature_loss(generated, data.missing_x,
                                                            data.missing_mask)
    if options.clf_weight > 0 and bool(data.train.any()):
        x, edge_index, _ = mend(data.x, data.edge_index, clip_counts(counts, model.num_pred),
                                generated)
        logits = model.classify(x, edge_index)[:len(data.keep)]
        loss = loss + options.clf_weight * F.cross_entropy(logits[data.train], data.y[data.train])
    return loss


def new_neighgen(in_dim: int, num_classes: int, options: FedSagePlusOptions) -> NeighGen:
    """NeighGen initialised from ``options.gen_seed`` (the same on every client)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(options.gen_seed)
        return NeighGen(in_dim, num_classes, options)


def train_neighgen(params: dict[str, Tensor] | None, data: Impaired, num_classes: int,
                   options: FedSagePlusOptions) -> tuple[dict[str, Tensor], float]:
    """``gen_local_steps`` Adam steps from ``params`` (None: a fresh NeighGen)."""
    model = new_neighgen(data.x.size(1), num_classes, options).to(data.x.device)
    if params is not None:
        model.load_state_dict(params)
    optimizer = torch.optim.Adam(model.parameters(), lr=options.gen_lr,
                                 weight_decay=options.gen_weight_decay)
    model.train()
    loss = torch.zeros(())
    for _ in range(options.gen_local_steps):
        optimizer.zero_grad(set_to_none=True)
        loss = neighgen_loss(model, data, options)
        loss.backward()
        optimizer.step()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, float(loss.detach())


@torch.no_grad()
def mend_with(params: dict[str, Tensor], graph: Data, num_classes: int,
              options: FedSagePlusOptions) -> Data:
    """``graph`` mended by the NeighGen ``params`` (eval mode: no dropout, no noise)."""
    model = new_neighgen(graph.x.size(1), num_classes, options).to(graph.x.device)
    model.load_state_dict(params)
    model.eval()
    counts, generated = model(graph.x.float(), graph.edge_index)
    return mended_graph(graph, clip_counts(counts, options.num_pred), generated)


def _split(message: Message) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """(classifier tensors, generator tensors without the prefix)."""
    return ({k: v for k, v in message.tensors.items() if not k.startswith(GEN)},
            under_prefix(message.tensors, GEN))


# ---------------------------------------------------------------- server and client

class FedSagePlusServer(FedAvgServer):
    """FedAvg of the classifier, plus FedAvg of NeighGen for ``gen_rounds`` rounds."""

    def __init__(self, setup):
        super().__init__(setup)
        self.gen: dict[str, Tensor] | None = None
        self.gen_done = 0  # generator aggregations so far
        self.mended: set[int] = set()
        self.training_gen: set[int] = set()  # clients asked to train the generator this round

    def configure_setup(self, clients):
        return {c: Message() for c in clients} if self.setup.options.gen_rounds > 0 else {}

    def setup_reply_spec(self, client):
        return None, ("num_samples",)

    def _aggregate_gen(self, replies: dict[int, Message]) -> None:
        gens = {c: _split(m)[1] for c, m in replies.items()}
        gens = {c: g for c, g in gens.items() if g}
        if not gens:
            return
        self.gen = weighted_average(list(gens.values()),
                                    [float(replies[c].scalars["num_samples_gen"])
                                     for c in gens])
        self.gen_done += 1

    def aggregate_setup(self, replies):
        self._aggregate_gen(replies)

    def configure_fit(self, rnd, clients):
        self.training_gen = set()
        if self.gen is None:
            return super().configure_fit(rnd, clients)
        train = self.gen_done < self.setup.options.gen_rounds
        gen = with_prefix(self.gen, GEN)
        out = {}
        for c in clients:
            if c in self.mended:
                out[c] = Message(tensors=self.params)
                continue
            out[c] = Message(tensors={**self.params, **gen}, scalars={TRAIN_GEN: train})
            if train:
                self.training_gen.add(c)
        return out

    def configure_evaluate(self, rnd, clients):
        return {c: Message(tensors=self.params) for c in clients}

    def reply_spec(self, client):
        spec = spec_of(self.params)
        if client in self.training_gen:
            spec.update({GEN + k: (tuple(v.shape), v.dtype) for k, v in self.gen.items()})
        return spec, ("num_samples",)

    def aggregate_fit(self, rnd, replies):
        self.mended |= {c for c, m in replies.items() if m.scalars.get(MENDED)}
        self._aggregate_gen(replies)
        classifier = {c: Message(tensors=_split(m)[0], scalars=m.scalars)
                      for c, m in replies.items()}
        super().aggregate_fit(rnd, classifier)

    def round_metrics(self):
        return {"fedsage+_generator_rounds": self.gen_done,
                "fedsage+_mended_clients": len(self.mended)}

    def state_dict(self):
        return {**super().state_dict(), "gen": self.gen, "gen_done": self.gen_done,
                "mended": sorted(self.mended)}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.gen, self.gen_done = state["gen"], state["gen_done"]
        self.mended = set(state["mended"])


class FedSagePlusClient(FedAvgClient):
    """Trains NeighGen on its impaired graph while asked to; then mends its graph with the final
    generator and trains / evaluates the classifier on the mended graph."""

    def _impaired(self, ctx) -> Impaired:
        device = ctx.data.x.device
        if IMPAIRED not in ctx.state:
            o = self.options
            ctx.state[IMPAIRED] = hide_nodes(ctx.data.graph, o.hide_portion, o.num_pred)
        if ctx.state[IMPAIRED].x.device != device:  # e.g. after a resume (loaded on the CPU)
            ctx.state[IMPAIRED] = ctx.state[IMPAIRED].to(device)
        return ctx.state[IMPAIRED]

    def _gen_reply(self, params, ctx) -> tuple[dict[str, Tensor], dict]:
        data = self._impaired(ctx)
        trained, loss = train_neighgen(params, data, self.setup.num_classes, self.options)
        return (with_prefix(trained, GEN),
                {"num_samples_gen": len(data.keep), "gen_loss": loss})

    def answer_setup(self, message, ctx):
        tensors, scalars = self._gen_reply(None, ctx)
        return Message(tensors=tensors, scalars={"num_samples": scalars["num_samples_gen"],
                                                 **scalars})

    def _view(self, ctx):
        """``ctx`` with the client's data showing the mended graph, once there is one (prepared
        on the client's device; rebuilt from the stored graph if that moved, e.g. on resume)."""
        if MENDED_GRAPH not in ctx.state:
            return ctx
        prepared = ctx.state.get(MENDED_DATA)
        if prepared is None or prepared.x.device != ctx.data.x.device:
            client = NodeClient(graph=ctx.state[MENDED_GRAPH], global_ids=ctx.data.global_ids)
            prepared = PreparedNodeClient(client, ctx.trainer.model, ctx.data.x.device,
                                          ctx.data.sampling)
            ctx.state[MENDED_DATA] = prepared
        return replace(ctx, data=prepared)

    def _mend(self, gen, ctx) -> None:
        graph = mend_with(gen, ctx.data.graph, self.setup.num_classes, self.options)
        ctx.state[MENDED_GRAPH] = graph
        ctx.state.pop(MENDED_DATA, None)
        ctx.state["fedsage+_generated_nodes"] = graph.num_nodes - ctx.data.graph.num_nodes

    def fit(self, message, ctx):
        classifier, gen = _split(message)
        tensors, scalars = {}, {}
        train_gen = bool(message.scalars.get(TRAIN_GEN, False)) and bool(gen)
        if train_gen:
            tensors, scalars = self._gen_reply(gen, ctx)
        elif gen:
            self._mend(gen, ctx)
        view = self._view(ctx)
        out = {"num_samples": view.data.num_samples("train"), MENDED: MENDED_GRAPH in ctx.state,
               **scalars}
        if train_gen and not self.options.classifier_during_gen:
            params = {k: v.clone() for k, v in classifier.items()}  # untouched this round
        else:
            params, stats = self.local_train(classifier, view)
            out["train_loss"] = stats.loss
        return Message(tensors={**params, **tensors}, scalars=out)

    def evaluate(self, message, ctx):
        classifier, _ = _split(message)
        return self.evaluate_params(classifier, self._view(ctx))


def fedsage_plus_model(level, in_dim, num_classes, opts, options=None):
    if level != "node":
        raise ValueError("FedSage+ is a node-classification method")
    return sage_backbone(level, in_dim, num_classes, opts, options)


FEDSAGE_PLUS = register(Algorithm(
    "fedsage+", FedSagePlusServer, FedSagePlusClient, FedSagePlusOptions, levels=("node",),
    model=fedsage_plus_model,
    description="FedSage on local graphs mended by NeighGen, a federatedly trained generator of "
    "missing neighbours (counts and features)"))
