"""FedSpray's global feature-structure encoder ω = (g_e, g_p, g_q) as plain parameters (spec §2,
§3.2): g_e embeds features, e = ReLU(W_e x + b_e); g_p classifies an embedding with a structure
proxy, p = softmax(W_p (e ⊕ s) + b_p); g_q projects the embedding alone, q = softmax(W_q e + b_q).

Parameters travel as named tensors (``ENCODER`` prefix), so the server averages and the
messages count them like any model; the computation below reads them, nothing is a module."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from graphfed.algorithms.fedspray.options import ENCODER, PROXIES, FedSprayOptions
from graphfed.messages import TensorSpec
from graphfed.models.sparse import linear
from graphfed.tensors import Params

EMBED, CLASSIFIER, PROJECTOR = ENCODER + "embed", ENCODER + "classifier", ENCODER + "projector"


def classifier_inputs(options: FedSprayOptions) -> int:
    """g_p's input width: d_s for e + s, 2 d_s for [e, s]."""
    return options.proxy_dim * (2 if options.combine == "concat" else 1)


def encoder_shapes(num_features: int, num_classes: int, options: FedSprayOptions
                   ) -> dict[str, tuple[int, ...]]:
    d_s = options.proxy_dim
    return {f"{EMBED}.weight": (d_s, num_features), f"{EMBED}.bias": (d_s,),
            f"{CLASSIFIER}.weight": (num_classes, classifier_inputs(options)),
            f"{CLASSIFIER}.bias": (num_classes,),
            f"{PROJECTOR}.weight": (num_classes, d_s), f"{PROJECTOR}.bias": (num_classes,)}


def message_spec(num_features: int, num_classes: int, options: FedSprayOptions) -> TensorSpec:
    """ω and, unless S = 0, the C x d_s class proxies: both directions carry exactly these."""
    spec = {k: (shape, torch.float32)
            for k, shape in encoder_shapes(num_features, num_classes, options).items()}
    if not options.zero_proxies:
        spec[PROXIES] = ((num_classes, options.proxy_dim), torch.float32)
    return spec


def initial_encoder(num_features: int, num_classes: int, options: FedSprayOptions) -> Params:
    """Weights and biases U(−1/√fan_out, 1/√fan_out), as the code's ``MLPLayer`` draws them
    (``model.py:103-124``), from the global RNG (the server's seeded setup call)."""
    out = {}
    for name, shape in encoder_shapes(num_features, num_classes, options).items():
        bound = 1.0 / shape[0] ** 0.5
        out[name] = torch.empty(shape).uniform_(-bound, bound)
    return out


def initial_proxies(num_classes: int, options: FedSprayOptions) -> Tensor:
    """The first global S: row j is ``global_proxy_step * j`` (the code's ``server.py:26``)."""
    rows = torch.arange(num_classes, dtype=torch.float32) * options.global_proxy_step
    return rows.view(-1, 1).expand(num_classes, options.proxy_dim).clone()


def _linear(params: Params, layer: str, inputs: Tensor) -> Tensor:
    return linear(inputs, params[f"{layer}.weight"], params[f"{layer}.bias"])


def embed(params: Params, x: Tensor) -> Tensor:
    """e = g_e(x)."""
    return F.relu(_linear(params, EMBED, x))


def project(params: Params, e: Tensor) -> Tensor:
    """The logits of q = g_q(e), the feature-only prediction."""
    return _linear(params, PROJECTOR, e)


def classify(params: Params, e: Tensor, proxies: Tensor, combine: str) -> Tensor:
    """The logits of p = g_p(e ⊕ s), the soft target read with each node's structure proxy."""
    joined = e + proxies if combine == "add" else torch.cat([e, proxies], dim=1)
    return _linear(params, CLASSIFIER, joined)
