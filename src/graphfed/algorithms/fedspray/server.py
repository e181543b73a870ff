"""FedSpray's server (spec §3.4): FedAvg of the encoder ω weighted by the clients' labelled-node
counts (Eq. 14; the code's ``len(trainIdx)``, the paper's "local node size"), and per class a
weighted mean of the clients' local class proxies (Eq. 15), weighted by each client's training
ratio of that class, so the clients where a class is the majority shape its proxy.

The class ratios come once, in the setup exchange (C floats per client, counted): the code's
server reads them off the clients' data, which a real server cannot."""

from __future__ import annotations

import math

import torch

from graphfed.algorithms.fedspray import encoder, proxies
from graphfed.algorithms.fedspray.options import CLASS_RATIOS, ENCODER, PROXIES, FedSprayOptions
from graphfed.mechanisms.robust import robust_average
from graphfed.messages import (
    NUM_SAMPLES,
    Message,
    MessageError,
    ScalarRange,
    ScalarSpec,
    TensorSpec,
    fit_scalars,
)
from graphfed.protocol import Server, Setup
from graphfed.tensors import Params

NUM_FEATURES = "num_features"  # the setup reply's scalar: d_x, which sizes g_e


class FedSprayServer(Server):
    options: FedSprayOptions
    state_keys = ("encoder", "proxies", "ratios", "num_features")

    def __init__(self, setup: Setup):
        super().__init__(setup)
        self.encoder: dict[str, torch.Tensor] = {}
        self.proxies = encoder.initial_proxies(setup.num_classes, self.options)
        self.ratios = torch.zeros(setup.num_clients, setup.num_classes)
        self.num_features = 0

    def configure_setup(self, clients: list[int]) -> dict[int, Message]:
        return {c: Message() for c in clients}

    def setup_reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        return ({CLASS_RATIOS: ((self.setup.num_classes,), torch.float32)},
                {NUM_FEATURES: ScalarRange(1, integer=True)})

    def check_setup_reply(self, client: int, message: Message) -> None:
        ratios = message.tensors[CLASS_RATIOS]
        total = float(ratios.sum())
        if bool((ratios < 0).any()) or not (math.isclose(total, 1.0, abs_tol=1e-4) or total == 0):
            raise MessageError(f"client {client}: class ratios must be non-negative and sum "
                               f"to 1, got sum {total:.6f}")

    def aggregate_setup(self, replies: dict[int, Message]) -> None:
        """Keep each client's class ratios; draw ω once d_x is known (the same for all)."""
        widths = {int(m.scalars[NUM_FEATURES]) for m in replies.values()}
        if len(widths) != 1:
            raise MessageError(f"clients disagree on the feature width: {sorted(widths)}")
        for client, message in replies.items():
            self.ratios[client] = message.tensors[CLASS_RATIOS]
        self.num_features = widths.pop()
        self.encoder = encoder.initial_encoder(self.num_features, self.setup.num_classes,
                                               self.options)

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        down = dict(self.encoder)
        if not self.options.zero_proxies:
            down[PROXIES] = self.proxies
        return {c: Message(down) for c in clients}

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        return (encoder.message_spec(self.num_features, self.setup.num_classes, self.options),
                fit_scalars())

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        if not replies:
            return
        sizes = [float(m.scalars[NUM_SAMPLES]) for m in replies.values()]
        models = [{k: v for k, v in m.tensors.items() if k.startswith(ENCODER)}
                  for m in replies.values()]
        self.encoder = robust_average(models, sizes, self.setup.aggregation, self.encoder)
        if self.options.zero_proxies:
            return
        clients = list(replies)
        self.proxies = proxies.align(self.proxies, [replies[c].tensors[PROXIES] for c in clients],
                                     self.ratios[clients], torch.tensor(sizes),
                                     self.options.proxy_weighting)

    def global_params(self) -> Params | None:
        return None  # the encoder only trains; each client deploys its own GNN
