"""DP-FedAvg's local variant (``dp.where=client``): each client clips its own update and adds
N(0, (z C)^2) before the reply leaves, so the server never sees an update without noise. Any
algorithm's client, wrapped as the attack simulation wraps it."""

from __future__ import annotations

import torch

from graphfed.mechanisms.updates import flatten, unflatten
from graphfed.messages import Message
from graphfed.privacy.dp_fedavg import clip_rows
from graphfed.privacy.options import DPOptions
from graphfed.protocol import Client, ClientContext
from graphfed.runtime.wrapped import ReplyChangingClient, call_generator

DP_STREAM = 0xD9F1  # keeps the local noise apart from every other use of the call's seed


class LocalDPClient(ReplyChangingClient):
    """``inner``, whose update (the floating-point reply tensors that answer a tensor it was
    sent, minus that tensor) is clipped to ``dp.clip`` and noised before it is sent."""

    def __init__(self, inner: Client, options: DPOptions):
        super().__init__(inner)
        self.dp = options

    def changed(self, received: Message, ctx: ClientContext, reply: Message) -> Message:
        sent = received.tensors
        names = [k for k, t in reply.tensors.items() if t.is_floating_point() and k in sent
                 and sent[k].shape == t.shape]
        if not names:
            return reply
        base = flatten({k: sent[k].double() for k in names}, names)
        after = flatten({k: reply.tensors[k].double().to(base.device) for k in names}, names)
        update, _ = clip_rows((after - base).unsqueeze(0), self.dp.clip)
        z = self.dp.noise_multiplier or 0.0
        noise = torch.randn(update.shape[1], generator=call_generator(DP_STREAM),
                            dtype=torch.float64)
        noised = base + update[0] + z * self.dp.clip * noise.to(base.device)
        out = dict(reply.tensors)
        for k, v in unflatten(noised, sent, names).items():
            out[k] = v.to(reply.tensors[k].dtype).to(reply.tensors[k].device)
        return Message(out, dict(reply.scalars))
