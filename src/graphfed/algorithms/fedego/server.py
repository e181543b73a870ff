"""FedEgo's server (spec §3.3): average Θ, train a global Φ_g on the round's mashed ego-graphs,
publish the global label distribution P_g."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from graphfed.algorithms.fedego.ego_view import MashedData, as_prepared
from graphfed.algorithms.fedego.options import (
    PERSONAL,
    REDUCTION,
    FedEgoOptions,
    split_params,
)
from graphfed.mechanisms.updates import with_prefix
from graphfed.messages import Message, MessageError, Scalar, ScalarSpec, TensorSpec, fit_scalars
from graphfed.models.ego import PersonalLayers, PersonalMLP, tree_size
from graphfed.privacy.ledger import Release
from graphfed.protocol import Server, Setup
from graphfed.training import Trainer
from graphfed.training.trainer import OptimizerOptions


class FedEgoServer(Server):
    """Averages Θ, trains Φ_g on the round's mashed ego-graphs, publishes P_g."""

    state_keys = ("theta", "phi", "distribution", "memory")
    options: FedEgoOptions

    def __init__(self, setup: Setup):
        super().__init__(setup)
        theta, phi = split_params(setup.initial_params)
        self.theta = {k: v.clone() for k, v in theta.items()}
        self.phi = {k: v.clone() for k, v in phi.items()}
        hidden = self.phi["classifier.weight"].shape[1]
        o = self.options
        self.size = tree_size(o.hops, o.fanout) if o.ego else 1
        layers = len({k.split(".")[1] for k in self.phi if k.startswith("convs.")})
        module = (PersonalLayers(hidden, setup.num_classes, layers, linear=o.linear,
                                 fanout=o.fanout, shared=o.sage_weights == "shared",
                                 last_activation=o.linear_last_relu) if o.ego
                  else PersonalMLP(hidden, setup.num_classes))
        module = module.to(self.phi["classifier.weight"].device)
        self.trainer = Trainer(module, OptimizerOptions(lr=self.options.server_lr,
                                                        weight_decay=0.0, persistent=True),
                               setup.num_classes)
        self.memory: dict = {}  # the server optimizer's state persists across rounds
        self.distribution: Tensor | None = None
        self.last: dict = {}

    def _message(self) -> Message:
        tensors = with_prefix(self.theta, REDUCTION)
        scalars: dict[str, Scalar] = {}
        if self.distribution is not None:
            tensors.update(with_prefix(self.phi, PERSONAL))
            tensors["label_distribution"] = self.distribution
            scalars["mix"] = 1
        return Message(tensors, scalars)

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        message = self._message()
        return {c: message for c in clients}

    configure_evaluate = configure_fit

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        hidden = self.phi["classifier.weight"].shape[1]
        spec = {REDUCTION + k: (tuple(v.shape), v.dtype) for k, v in self.theta.items()}
        spec["mashed_x"] = ((-1, self.size, hidden), torch.float32)
        spec["mashed_y"] = ((-1, self.size, self.setup.num_classes), torch.float32)
        return spec, fit_scalars()

    def check_reply(self, client: int, message: Message) -> None:
        sums = message.tensors["mashed_y"].sum(-1)
        if not torch.allclose(sums, torch.ones_like(sums), atol=1e-4):
            raise MessageError(f"client {client}: mashed soft labels do not sum to 1")

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        if not replies:
            return
        theta = [split_params(m.tensors)[0] for m in replies.values()]
        self.theta = {k: torch.stack([t[k] for t in theta]).mean(0) for k in self.theta}
        x = torch.cat([m.tensors["mashed_x"] for m in replies.values()])
        y = torch.cat([m.tensors["mashed_y"] for m in replies.values()])
        self.distribution = y.reshape(-1, y.shape[-1]).mean(0)
        loss = None
        if self.options.server_epochs:
            mashed = as_prepared(MashedData(x, y, self.options))
            self.phi, stats = self.trainer.train(self.phi, mashed,
                                                 self.options.server_epochs,
                                                 self.setup.batch_size or 32, memory=self.memory)
            loss = stats.loss
        ego = sum(m.tensors["mashed_x"].nbytes + m.tensors["mashed_y"].nbytes
                  for m in replies.values())
        self.last = {"mashed_graphs": len(x), "upload_ego_bytes": ego, "server_loss": loss}
        if self.options.noise_sigma > 0:
            self.record_release(Release(
                "fedego.embeddings", "gaussian", count=len(replies),
                note=f"noise std {self.options.noise_sigma:g} on unclipped embeddings: no "
                "bounded sensitivity, so no epsilon"))

    def round_metrics(self) -> dict[str, Any]:
        return dict(self.last)
