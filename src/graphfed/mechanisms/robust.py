"""Byzantine-robust aggregation: the rules an averaging server may use instead of the mean.

A few malicious clients can move a (weighted) mean arbitrarily far; each rule here bounds what
they can do, at some cost in statistical efficiency when every client is honest:

* ``median``: coordinate-wise median, and ``trimmed_mean``: coordinate-wise mean after cutting
  the ``trim`` share of largest and smallest values (Yin et al., "Byzantine-robust distributed
  learning", ICML 2018). Unweighted, as in the paper: a client's claimed size buys it nothing.
* ``krum``: the reply closest to its n - f - 2 nearest neighbours (sum of squared distances),
  and ``multi_krum``: the mean of the m best-scored replies (Blanchard et al., "Machine learning
  with adversaries", NeurIPS 2017). Unweighted, as in the paper; Krum's guarantee needs
  n > 2f + 2 replies.
* ``norm_clip``: every client's update (reply minus the current global model) scaled down to
  norm <= ``clip``, then the sample-weighted mean (Sun et al., "Can you really backdoor federated
  learning?", 2019).

Any rule but the mean may first average the replies in random buckets of ``bucket`` (Karimireddy,
He and Jaggi, "Byzantine-robust learning on heterogeneous datasets via bucketing", ICLR 2022,
Alg. 1): on non-IID clients honest replies lie far apart and a robust rule throws honest
information away with the attack; bucket means are closer together, while f attackers still
spoil at most f buckets. The bucketing draws from torch's generator, which the runtime seeds per
round (``seeding.seeded_call``), so it is the same on every runtime.

The median, trimmed mean and Krum are computed on the parameters themselves: subtracting the
same global model from every reply commutes with them (the median of x_i - g is the median of
x_i, minus g; distances between x_i - g and x_j - g are those between x_i and x_j). Norm clipping
does not commute, so it needs the global model (``reference``).

Before any rule, the round logic drops the fit replies whose updates no rule can use
(``unusable_updates``): an update whose norm overflows float32, or exceeds ``max_norm_ratio``
times the round's median update norm. One client scaling its update by 1e36 would otherwise carry
the mean (and a trimmed mean that trims nothing, as with few clients) to values whose next
training step overflows, and every client's next reply would be NaN.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Literal, TypeVar

import torch
from pydantic import BaseModel, Field
from torch import Tensor

from graphfed.mechanisms.aggregation import normalised_weights, weighted_average
from graphfed.mechanisms.updates import flatten, unflatten
from graphfed.tensors import Params
from graphfed.validation import OPTIONS

log = logging.getLogger("graphfed.aggregation")

Rule = Literal["mean", "median", "trimmed_mean", "krum", "multi_krum", "norm_clip"]
KRUM_RULES = ("krum", "multi_krum")
FLOAT32_MAX = float(torch.finfo(torch.float32).max)
K = TypeVar("K")


class AggregationOptions(BaseModel):
    """The config section ``aggregation``: how an averaging server combines the replies."""

    model_config = OPTIONS

    rule: Rule = Field("mean", description="mean (sample-weighted, FedAvg), median, "
                       "trimmed_mean, krum, multi_krum or norm_clip")
    trim: float = Field(0.2, ge=0.0, lt=0.5, description="trimmed_mean: share of the values cut "
                        "from each end of every coordinate (floor(trim * n) replies per end)")
    byzantine: int | None = Field(None, ge=0, description="krum/multi_krum: the number f of "
                                  "attackers to tolerate (None: the largest f with n > 2f + 2 "
                                  "for the n replies of the round)")
    multi_krum_m: int | None = Field(None, ge=1, description="multi_krum: how many of the "
                                     "best-scored replies to average (None: n - f)")
    clip: float | None = Field(None, gt=0.0, description="norm_clip: the bound on each "
                               "update's L2 norm (None: the median update norm of the round)")
    bucket: int = Field(1, ge=1, description="every rule but mean: average the replies in "
                        "random buckets of this many before the rule (ICLR 2022 bucketing; "
                        "1: none)")
    max_norm_ratio: float | None = Field(
        1e6, gt=1.0, description="every algorithm: a fit reply whose update norm exceeds this "
        "many times the round's median update norm is dropped (None: no such bound; an "
        "update whose norm overflows float32 is dropped always)")


def krum_tolerance(n: int, options: AggregationOptions) -> int | None:
    """f for Krum over ``n`` replies: ``options.byzantine``, or the largest f with n > 2f + 2;
    None when n replies are too few for that f (n <= 2f + 2, or n < 3)."""
    f = options.byzantine if options.byzantine is not None else (n - 3) // 2
    return f if n >= 3 and n > 2 * f + 2 else None


def check_rule(options: AggregationOptions, clients_per_round: int) -> None:
    """Raise ``ValueError`` for a rule that cannot work with ``clients_per_round`` replies."""
    if options.bucket > 1 and options.rule == "mean":
        raise ValueError("aggregation.bucket applies to the robust rules; the mean of bucket "
                         "means is the mean: leave it at 1 with rule=mean")
    if options.rule not in KRUM_RULES:
        return
    buckets = math.ceil(clients_per_round / options.bucket)
    if krum_tolerance(buckets, options) is None:
        f = "f" if options.byzantine is None else str(options.byzantine)
        raise ValueError(f"aggregation.rule={options.rule} needs n > 2f + 2 replies per round "
                         f"(at least 3), but a round gives {buckets} (clients "
                         f"{clients_per_round}, bucket {options.bucket}) with f = {f}; sample "
                         "more clients or lower aggregation.byzantine or aggregation.bucket")
    m = options.multi_krum_m
    if options.rule == "multi_krum" and m is not None and m > clients_per_round:
        raise ValueError(f"aggregation.multi_krum_m={m} exceeds the {clients_per_round} "
                         "clients a round samples")


def robust_average(params: Sequence[Params], weights: Sequence[float],
                   options: AggregationOptions, reference: Params | None = None) -> Params:
    """The replies ``params`` combined by ``options.rule``; ``weights`` (sample counts) count
    only for ``mean`` and ``norm_clip``; ``reference`` is the current global model, whose
    difference to each reply ``norm_clip`` bounds (None: the replies are clipped themselves).

    When a round's replies are too few for Krum (clients dropped), the coordinate-wise median
    combines them instead, with a logged warning: never a silent crash nor a silent mean."""
    if not params:
        raise ValueError("robust_average needs at least one parameter set")
    if options.rule == "mean":
        return weighted_average(params, weights)
    names = list(params[0])
    stacked = torch.stack([flatten(_as_float64(p), names) for p in params])
    w = normalised_weights(weights)
    if options.bucket > 1:
        stacked, w = bucket_means(stacked, w, options.bucket)
    rule, n = options.rule, len(stacked)
    f = krum_tolerance(n, options) if rule in KRUM_RULES else None
    if rule in KRUM_RULES and f is None:
        log.warning("%s needs n > 2f + 2 replies, got %d: using the coordinate-wise median",
                    rule, n)
        rule = "median"
    if rule == "median":
        vector = coordinate_median(stacked)
    elif rule == "trimmed_mean":
        vector = trimmed_mean(stacked, options.trim)
    elif rule == "norm_clip":
        base = (flatten(_as_float64(reference), names) if reference is not None
                else torch.zeros_like(stacked[0]))
        vector = base + clipped_mean(stacked - base, w, options.clip)
    else:
        assert f is not None  # a Krum rule is kept only with its f
        m = 1 if rule == "krum" else min(options.multi_krum_m or n - f, n)
        vector = stacked[krum_select(stacked, f, m)].mean(0)
    return {k: v.to(params[0][k].dtype) for k, v in unflatten(vector, params[0], names).items()}


def bucket_means(stacked: Tensor, weights: Tensor, size: int) -> tuple[Tensor, Tensor]:
    """The rows of ``stacked`` in a random order, cut into buckets of ``size`` (the last may be
    smaller), each replaced by its weighted mean; a bucket weighs the sum of its weights."""
    order = torch.randperm(len(stacked))
    means, totals = [], []
    for part in order.split(size):
        share = weights[part]
        total = share.sum()
        means.append((share / total.clamp_min(1e-300)) @ stacked[part])
        totals.append(total)
    return torch.stack(means), torch.stack(totals)


def _as_float64(params: Params) -> Params:
    return {k: v.to(torch.float64) for k, v in params.items()}


def coordinate_median(stacked: Tensor) -> Tensor:
    """Median of every column of ``stacked`` (n x d); for even n the mean of the two middle
    values (``torch.median`` would return the lower one)."""
    ordered = stacked.sort(0).values
    n = len(ordered)
    return (ordered[(n - 1) // 2] + ordered[n // 2]) / 2


def trimmed_mean(stacked: Tensor, trim: float) -> Tensor:
    """Mean of every column after cutting its floor(trim * n) largest and smallest values."""
    n = len(stacked)
    cut = math.floor(trim * n + 1e-9)  # 0.29 * 100 is 28.999...: still 29
    return stacked.sort(0).values[cut:n - cut].mean(0)


def krum_scores(stacked: Tensor, f: int) -> Tensor:
    """Each row's sum of squared distances to its n - f - 2 nearest other rows (Krum's score)."""
    squared = torch.cdist(stacked, stacked).pow(2)
    squared.fill_diagonal_(math.inf)
    return squared.topk(len(stacked) - f - 2, dim=1, largest=False).values.sum(1)


def krum_select(stacked: Tensor, f: int, m: int) -> Tensor:
    """Indices of the ``m`` rows with the lowest Krum scores (Krum: m = 1)."""
    return krum_scores(stacked, f).argsort()[:m]


def clipped_mean(updates: Tensor, weights: Tensor, clip: float | None) -> Tensor:
    """Weighted mean of the rows of ``updates`` after scaling each to norm <= ``clip`` (None:
    the median row norm)."""
    norms = updates.norm(dim=1)
    bound = clip if clip is not None else float(coordinate_median(norms.unsqueeze(1)))
    factors = (bound / norms.clamp_min(1e-12)).clamp(max=1.0)
    return torch.matmul(weights.to(updates.device) * factors, updates)


def update_norms(replies: Mapping[K, Params], sent: Mapping[K, Params]) -> dict[K, float]:
    """The L2 norm of each reply's update: its floating-point tensors, each minus the tensor of
    the same name, shape, dtype and device that ``sent`` gave its client (a model it trained),
    or as it is where none was sent (an embedding, an update). Taken per tensor in the
    tensor's dtype (half precision in float32) with one ``_foreach_norm`` per device and
    dtype, so an update whose float32 norm overflows has an infinite norm, and a reply with a
    NaN or an infinity anywhere a non-finite one: the norms are also the replies' finite
    check (an L2 norm costs less than ``messages.finite_messages``' L1 norm on the CPU)."""
    groups: dict[tuple[torch.device, torch.dtype], tuple[list[Tensor], list[K]]] = {}
    for key, tensors in replies.items():
        base = sent.get(key, {})
        for name, t in tensors.items():
            if not t.is_floating_point() or not t.numel():
                continue
            b = base.get(name)
            if torch.finfo(t.dtype).bits < 32:  # a half-precision difference overflows early
                t, b = t.float(), None if b is None else b.float()
            if (b is not None and b.shape == t.shape and b.dtype == t.dtype
                    and b.device == t.device):
                t = t - b
            updates, owners = groups.setdefault((t.device, t.dtype), ([], []))
            updates.append(t)
            owners.append(key)
    squares = dict.fromkeys(replies, 0.0)
    with torch.no_grad():
        for updates, owners in groups.values():
            norms = torch.stack(torch._foreach_norm(updates, 2)).tolist()
            for key, norm in zip(owners, norms, strict=True):
                squares[key] += norm * norm
    return {key: math.sqrt(square) for key, square in squares.items()}


def unusable_updates(norms: Mapping[K, float], ratio: float | None) -> dict[K, str]:
    """The replies whose update norms no aggregation can use, and why: a norm that is not
    finite or overflows float32, or above ``ratio`` times the round's median norm (the lower
    median of the finite ones, so one attacker of two does not set it; never when it is 0)."""
    usable = sorted(n for n in norms.values() if math.isfinite(n) and n <= FLOAT32_MAX)
    median = usable[(len(usable) - 1) // 2] if usable else 0.0
    out = {}
    for key, norm in norms.items():
        if not (math.isfinite(norm) and norm <= FLOAT32_MAX):
            out[key] = f"its update norm {norm:.3g} is not finite in float32"
        elif ratio is not None and median > 0 and norm > ratio * median:
            out[key] = (f"its update norm {norm:.3g} exceeds {ratio:g} times the round's "
                        f"median {median:.3g} (aggregation.max_norm_ratio)")
    return out
