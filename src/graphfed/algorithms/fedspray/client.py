"""FedSpray's client (Algorithm 1, spec §3.3): two phases per round, full batch on its graph.

Phase 1 trains the personalised GNN f(θ_k) on its labelled nodes with cross-entropy plus
λ1·KL(p‖ŷ) towards the soft targets p = g_p(g_e(x) ⊕ s) of the received encoder, whose proxies
s give every node its class's structure, not its neighbours' (Eqs. 5-7). Phase 2 starts the
encoder from the received ω and trains it and the labelled nodes' proxies with CE(q, y) plus
λ2·KL(ŷ‖p) towards the updated GNN (Eqs. 12-13), then sends ω_k and its class-mean proxies.

The GNN never leaves the client: it, the three Adam optimisers' states and (code profile) the
per-node proxies live in ``ctx.state``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from graphfed.algorithms.fedspray import encoder, proxies
from graphfed.algorithms.fedspray.options import CLASS_RATIOS, ENCODER, PROXIES, FedSprayOptions
from graphfed.algorithms.fedspray.server import NUM_FEATURES
from graphfed.algorithms.personalized.base import PersonalClient
from graphfed.messages import Message
from graphfed.models.sparse import is_csr, to_csr
from graphfed.protocol import ClientContext
from graphfed.tensors import Params
from graphfed.training import TrainStats

# what the client keeps in ctx.state beside its GNN (ctx.state["params"])
GNN_OPTIMIZER, ENCODER_OPTIMIZER, PROXY_OPTIMIZER = ("fedspray_gnn_opt", "fedspray_encoder_opt",
                                                     "fedspray_proxy_opt")
NODE_PROXIES = "fedspray_node_proxies"  # per_node_persistent: the labelled nodes' own proxies
FEATURES = "fedspray_features"  # ctx.cache: the raw features on the device (SGC propagates x)


def _kl(log_student: Tensor, teacher: Tensor) -> Tensor:
    """KL(teacher ‖ student), the sum over nodes divided by their number ("batchmean")."""
    return F.kl_div(log_student, teacher, reduction="batchmean")


def _adam(params: list[Tensor], lr: float, state: dict, key: str) -> torch.optim.Adam:
    """An Adam over ``params`` that resumes the moments kept under ``key`` (the code keeps
    each optimiser across rounds)."""
    optimizer = torch.optim.Adam(params, lr=lr)
    if key in state:
        optimizer.load_state_dict(state[key])
    return optimizer


class FedSprayClient(PersonalClient):
    options: FedSprayOptions

    def receive(self, params: Params, message: Message, ctx: ClientContext) -> Params:
        return params  # the server's encoder teaches the GNN in fit; it never replaces it

    def answer_setup(self, message: Message, ctx: ClientContext) -> Message:
        """Send the class ratios of the labelled nodes (the server's proxy weights) and d_x;
        with ``gnn_init=uniform01`` draw this client's own GNN, every parameter U(0, 1)."""
        if self.options.gnn_init == "uniform01":
            ctx.state["params"] = {k: torch.rand_like(v)
                                   for k, v in self.setup.initial_params.items()}
        ratios = proxies.class_ratios(ctx.node_data().labels("train"), self.setup.num_classes)
        return Message({CLASS_RATIOS: ratios.float().cpu()},
                       {NUM_FEATURES: int(ctx.node_data().graph.x.shape[1])})

    def fit(self, message: Message, ctx: ClientContext) -> Message:
        o = self.options
        omega = {k: v for k, v in message.tensors.items() if k.startswith(ENCODER)}
        x, x_train = self._features(ctx)
        with torch.no_grad():
            e = encoder.embed(omega, x)
            q = F.softmax(encoder.project(omega, e), dim=1)
            s = self.phase1_proxies(message, ctx, q)
            p = F.softmax(encoder.classify(omega, e, s, o.combine), dim=1)
        gnn, stats = self.train_gnn(ctx, p, self.kd_nodes(ctx, q))
        ctx.state["params"] = gnn
        with torch.no_grad():
            ctx.trainer.model.eval()
            y_hat = F.softmax(self._gnn_logits(ctx, gnn), dim=1)[ctx.node_data().index["train"]]
        trained, node_proxies = self.train_encoder(message, ctx, omega, x_train, y_hat)
        up = dict(trained)
        if not o.zero_proxies:
            up[PROXIES] = proxies.class_means(node_proxies, ctx.node_data().labels("train"),
                                              self.setup.num_classes).cpu()
        return self.reply(up, ctx, stats)

    # ---------------------------------------------------------------- phase 1

    def phase1_proxies(self, message: Message, ctx: ClientContext, q: Tensor) -> Tensor:
        """Every node's proxy under the received S: an unlabelled node's from its projector
        prediction (Eq. 10), a labelled node's from its class (paper) or its own (code)."""
        if self.options.zero_proxies:
            return torch.zeros(len(q), self.options.proxy_dim, device=q.device)
        class_proxies = message.tensors[PROXIES]
        s = proxies.soft_proxies(q, class_proxies)
        train = ctx.node_data().index["train"]
        s[train] = self.labelled_proxies(ctx, class_proxies)
        return s

    def kd_nodes(self, ctx: ClientContext, q: Tensor) -> Tensor:
        """The nodes of the KD term: all, or the labelled ones plus the unlabelled ones the
        received projector is confident on (max q > threshold)."""
        if self.options.kd_nodes == "all":
            return torch.arange(len(q), device=q.device)
        confident = q.max(dim=1).values > self.options.conf_threshold
        confident[ctx.node_data().index["train"]] = True
        return torch.nonzero(confident).view(-1)

    def train_gnn(self, ctx: ClientContext, p: Tensor, kd: Tensor) -> tuple[Params, TrainStats]:
        """Eq. 7 for ``local_epochs`` full-batch Adam steps: CE on the labelled nodes plus
        λ1·KL(p‖ŷ) on ``kd``; the optimiser's moments persist in ctx.state."""
        live = {k: v.detach().clone().requires_grad_(True) for k, v in self.own_params(ctx).items()}
        optimizer = ctx.trainer.make_optimizer(list(live.values()))
        if GNN_OPTIMIZER in ctx.state:
            optimizer.load_state_dict(ctx.state[GNN_OPTIMIZER])
        train, y = ctx.node_data().index["train"], ctx.node_data().y
        ctx.trainer.model.train()
        total = 0.0
        for _ in range(self.setup.local_epochs):
            optimizer.zero_grad(set_to_none=True)
            logits = self._gnn_logits(ctx, live)
            ce = F.cross_entropy(logits[train], y[train])
            loss = ce
            if self.options.lambda1 > 0:
                loss = ce + self.options.lambda1 * _kl(F.log_softmax(logits[kd], dim=1), p[kd])
            loss.backward()
            optimizer.step()
            total += float(ce.detach())
        ctx.state[GNN_OPTIMIZER] = optimizer.state_dict()
        epochs = self.setup.local_epochs
        return ({k: v.detach() for k, v in live.items()},
                TrainStats(total / max(epochs, 1), epochs, epochs * len(train)))

    # ---------------------------------------------------------------- phase 2

    def train_encoder(self, message: Message, ctx: ClientContext, omega: Params,
                      x_train: Tensor, y_hat: Tensor) -> tuple[Params, Tensor]:
        """Eqs. 12-13 for ``local_epochs`` steps from the received ω: CE(q, y) + λ2·KL(ŷ‖p) on
        the labelled nodes, Adam on ω and on the labelled nodes' proxies (unless S = 0)."""
        o = self.options
        start = dict(omega)
        if o.projector_init == "global_classifier":
            start[f"{encoder.PROJECTOR}.weight"] = omega[f"{encoder.CLASSIFIER}.weight"]
            start[f"{encoder.PROJECTOR}.bias"] = omega[f"{encoder.CLASSIFIER}.bias"]
        live = {k: v.detach().clone().requires_grad_(True) for k, v in start.items()}
        optimizers = [_adam(list(live.values()), o.encoder_lr, ctx.state, ENCODER_OPTIMIZER)]
        train = ctx.node_data().index["train"]
        y_l = ctx.node_data().y[train]
        if o.zero_proxies:
            node_proxies = torch.zeros(len(train), o.proxy_dim, device=y_l.device)
        else:
            node_proxies = self.labelled_proxies(ctx, message.tensors[PROXIES]).clone()
            node_proxies.requires_grad_(True)
            optimizers.append(_adam([node_proxies], o.proxy_lr, ctx.state, PROXY_OPTIMIZER))
        for _ in range(self.setup.local_epochs):
            for optimizer in optimizers:
                optimizer.zero_grad(set_to_none=True)
            e = encoder.embed(live, x_train)
            ce = F.cross_entropy(encoder.project(live, e), y_l)
            p_logits = encoder.classify(live, e, node_proxies, o.combine)
            loss = ce + o.lambda2 * _kl(F.log_softmax(p_logits, dim=1), y_hat)
            loss.backward()
            for optimizer in optimizers:
                optimizer.step()
        ctx.state[ENCODER_OPTIMIZER] = optimizers[0].state_dict()
        node_proxies = node_proxies.detach()
        if not o.zero_proxies:
            ctx.state[PROXY_OPTIMIZER] = optimizers[1].state_dict()
            if o.labeled_proxy_mode == "per_node_persistent":
                ctx.state[NODE_PROXIES] = node_proxies
        return {k: v.detach().cpu() for k, v in live.items()}, node_proxies

    # ---------------------------------------------------------------- shared

    def labelled_proxies(self, ctx: ClientContext, class_proxies: Tensor) -> Tensor:
        """The labelled nodes' proxies at the start of a round: their class's global proxy
        (paper) or their own, kept across rounds from ``node_proxy_init`` (code)."""
        labels = ctx.node_data().labels("train")
        if self.options.labeled_proxy_mode == "global_class":
            return class_proxies[labels]
        if NODE_PROXIES not in ctx.state:
            ctx.state[NODE_PROXIES] = torch.full((len(labels), self.options.proxy_dim),
                                                 self.options.node_proxy_init,
                                                 device=class_proxies.device)
        return ctx.state[NODE_PROXIES]

    def _gnn_logits(self, ctx: ClientContext, params: Params) -> Tensor:
        everyone = torch.arange(len(ctx.node_data().y), device=ctx.node_data().y.device)
        return ctx.trainer.forward(params, ctx.node_data().batch_of(everyone))

    def _features(self, ctx: ClientContext) -> tuple[Tensor, Tensor]:
        """The client's raw features and its labelled nodes' rows on the device, once per
        process (the encoder reads x, not the backbone's prepared input); sparse CSR when the
        backbone's input is (``model.sparse_features``)."""
        if FEATURES not in ctx.cache:
            x = ctx.node_data().graph.x.float().to(ctx.node_data().y.device)
            rows = x[ctx.node_data().index["train"]]
            if is_csr(ctx.node_data().x):
                x, rows = to_csr(x), to_csr(rows)
            ctx.cache[FEATURES] = x, rows
        return ctx.cache[FEATURES]
