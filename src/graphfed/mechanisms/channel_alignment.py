"""FedLit's server side (Xie, Xiong, Yang, WWW 2023; ``Oxfordblue7/FedLIT:src/models/server.py``):
clients discover their link types independently, so client i's channel c need not be anyone
else's channel c. The server matches each client's edge prototypes one-to-one to its global
prototypes by cosine similarity (greedily, most similar pair first, as the code's
``_update_groups``), reorders the client's channels into the global order, and averages each
global channel over the client channels matched to it.

Channel tensors carry one slice per link type along their first dimension (``LinkTypeGNN``), so
aligning a client is indexing its channel tensors by a permutation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Literal

import torch
import torch.nn.functional as F
from torch import Tensor

from graphfed.mechanisms.matching import greedy_pairs
from graphfed.tensors import Params

ChannelWeighting = Literal["uniform", "samples"]


def channel_order(prototypes: Tensor, centers: Tensor) -> Tensor:
    """``order[g]``: the client's channel matched to global channel g (a permutation of
    0..K-1), greedy by largest cosine similarity of the client's prototypes to ``centers``."""
    cosine = F.normalize(prototypes.double(), dim=1) @ F.normalize(centers.double(), dim=1).T
    partner = greedy_pairs(-cosine)  # partner[c]: the global channel of client channel c
    return torch.argsort(partner)


def align_channels(params: Params, order: Tensor, is_channel: Callable[[str], bool]) -> Params:
    """``params`` with every channel tensor's slices put in the global order ``order``."""
    return {k: v[order.to(v.device)] if is_channel(k) else v for k, v in params.items()}


def channel_weights(counts: Tensor, rule: ChannelWeighting) -> Tensor:
    """Each client's weight in each global channel (n × K, from its aligned per-channel
    training-node counts n × K). Only a client whose channel saw a training node takes part (the
    code's ``cluster_train_size != 0``), uniformly (``uniform``, the code) or by its count
    (``samples``). A column sums to 1, or is all zero where no client took part."""
    counts = counts.double()
    raw = (counts > 0).double() if rule == "uniform" else counts
    total = raw.sum(0, keepdim=True)
    return torch.where(total > 0, raw / total.clamp_min(1e-300), torch.zeros_like(raw))


def average_channels(aligned: Sequence[Params], weights: Tensor, current: Params,
                     names: Sequence[str]) -> Params:
    """Each global channel of the tensors ``names``: the ``weights``-weighted sum of the aligned
    clients' slices; a channel no client took part in keeps its ``current`` slice."""
    out = {}
    for name in names:
        stacked = torch.stack([p[name] for p in aligned]).double()  # n × K × ...
        w = weights.to(stacked.device).view(*weights.shape, *(1,) * (stacked.dim() - 2))
        mixed = (stacked * w).sum(0)
        taken = (weights.sum(0) > 0).to(stacked.device).view(-1, *(1,) * (stacked.dim() - 2))
        out[name] = torch.where(taken, mixed, current[name].double()).to(current[name].dtype)
    return out
