"""FedTAD's server: FedAvg, then the reliability-weighted data-free distillation of the
replying clients' models into the average (``distillation``). What it keeps across rounds: the
global model, the generator, and both Adams' moments."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from graphfed.algorithms.averaging.fedavg import FedAvgServer
from graphfed.algorithms.averaging.fedtad.distillation import (
    Distiller,
    diversity_loss,
    pseudo_labels,
)
from graphfed.algorithms.averaging.fedtad.options import FedTADOptions
from graphfed.algorithms.averaging.fedtad.reliability import normalised_reliability
from graphfed.data.federated import ClientData, FederatedData
from graphfed.errors import GraphfedError
from graphfed.messages import Message, MessageError, ScalarSpec, TensorSpec
from graphfed.models.conditional_generator import ConditionalGenerator
from graphfed.models.prototype_net import params_seed
from graphfed.protocol import SERVER_DEVICE, Setup
from graphfed.tensors import Params, move_tensors
from graphfed.training import PreparedClient

RELIABILITY = "fedtad_reliability"  # reply tensor: the client's CKR, one value per class
GENERATOR_SALT = -2  # the generator's initial weights' seed, beside the run's initial model


def server_inputs(data: FederatedData, on_server: Callable[[ClientData], PreparedClient]
                  ) -> dict[str, Any]:
    """The node feature width, the generator's output (the operator's dataset fixes it)."""
    return {"num_features": data.num_features}


class FedTADServer(FedAvgServer):
    state_keys = (*FedAvgServer.state_keys, "generator", "generator_optimizer",
                  "student_optimizer")
    options: FedTADOptions

    def __init__(self, setup: Setup, num_features: int | None = None):
        super().__init__(setup)
        if setup.network is None or num_features is None:
            raise GraphfedError("fedtad's server distils on the run's network and the "
                                "dataset's feature width; build it with build_server")
        o = self.options
        self.network = setup.network
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(params_seed(setup.initial_params, GENERATOR_SALT))
            self.generator_net = ConditionalGenerator(o.noise_dim, setup.num_classes,
                                                      num_features, o.generator_hidden,
                                                      o.generator_dropout)
        self.generator: Params = {k: v.detach().clone()
                                  for k, v in self.generator_net.named_parameters()}
        self.generator_optimizer: dict[str, Any] | None = None
        self.student_optimizer: dict[str, Any] | None = None
        self.last: dict[str, Any] = {}

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        spec, scalars = super().reply_spec(client)
        assert spec is not None
        return {**spec, RELIABILITY: ((self.setup.num_classes,), torch.float32)}, scalars

    def check_reply(self, client: int, message: Message) -> None:
        if bool((message.tensors[RELIABILITY] < 0).any()):
            raise MessageError(f"client {client}: a negative class reliability")

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        """FedAvg over the models, then the distillation with the replies' reliabilities."""
        if not replies:
            return
        models = [{k: m.tensors[k] for k in self.params} for m in replies.values()]
        self.params = self.average(models, self.weights(replies), self.params)
        reliability = torch.stack([m.tensors[RELIABILITY] for m in replies.values()])
        omega = normalised_reliability(reliability.to(torch.float64),
                                       self.options.reliability_norm)
        self.distill(models, omega.to(torch.float32))

    def distill(self, teachers_cpu: list[Params], omega_cpu: Tensor) -> None:
        """``glb_epochs`` epochs of generator and student steps (``distillation``)."""
        o = self.options
        if o.glb_epochs == 0 or (o.it_g == 0 and o.it_d == 0):
            return
        device = next(self.network.parameters()).device
        teachers = [move_tensors(t, device) for t in teachers_cpu]
        omega = omega_cpu.to(device)
        student = {k: v.detach().to(device).clone().requires_grad_(True)
                   for k, v in self.params.items()}
        generator = {k: v.detach().to(device).clone().requires_grad_(True)
                     for k, v in self.generator.items()}
        self.generator_net.to(device)
        decay = (self.setup.optimizer.weight_decay if o.server_weight_decay is None
                 else o.server_weight_decay)
        g_opt = torch.optim.Adam([generator[k] for k in sorted(generator)], lr=o.lr_g,
                                 weight_decay=decay)
        s_opt = torch.optim.Adam([student[k] for k in sorted(student)], lr=o.lr_d,
                                 weight_decay=decay)
        # copies: Adam steps the moments it loads in place, and those are the server's state
        if self.generator_optimizer is not None:
            g_opt.load_state_dict(move_tensors(self.generator_optimizer, device, copy=True))
        if self.student_optimizer is not None:
            s_opt.load_state_dict(move_tensors(self.student_optimizer, device, copy=True))
        run = Distiller(self.network, self.generator_net)
        labels = pseudo_labels(o.num_gen, self.setup.num_classes, device)
        g_loss = d_loss = float("nan")
        for _ in range(o.glb_epochs):
            z = torch.randn(o.num_gen, o.noise_dim).to(device)  # drawn on the CPU
            frozen = {k: v.detach() for k, v in student.items()}
            self.generator_net.train()
            for _ in range(o.it_g):
                g_opt.zero_grad(set_to_none=True)
                graph = run.graph(generator, z, labels, o.topk)
                taught = [run.logits(t, graph, training=False) for t in teachers]
                learnt = run.logits(frozen, graph, training=False)
                loss = (o.lam1 * run.semantic(taught, omega, labels)
                        - run.disagreement(learnt, [t.detach() for t in taught], omega, labels)
                        + o.lam2 * len(teachers) * diversity_loss(z, graph.features))
                loss.backward()
                g_opt.step()
                g_loss = float(loss.detach())
            self.generator_net.eval()
            with torch.no_grad():
                graph = run.graph({k: v.detach() for k, v in generator.items()}, z, labels,
                                  o.topk)
                taught = [run.logits(t, graph, training=False) for t in teachers]
            for _ in range(o.it_d):
                s_opt.zero_grad(set_to_none=True)
                loss = run.disagreement(run.logits(student, graph, training=True), taught,
                                        omega, labels)
                loss.backward()
                s_opt.step()
                d_loss = float(loss.detach())
        self.generator_net.to(SERVER_DEVICE)
        self.params = {k: v.detach().to(SERVER_DEVICE) for k, v in student.items()}
        self.generator = {k: v.detach().to(SERVER_DEVICE) for k, v in generator.items()}
        self.generator_optimizer = move_tensors(g_opt.state_dict(), SERVER_DEVICE)
        self.student_optimizer = move_tensors(s_opt.state_dict(), SERVER_DEVICE)
        self.last = {"generator_loss": g_loss, "distill_loss": d_loss}

    def round_metrics(self) -> dict[str, Any]:
        return self.last
