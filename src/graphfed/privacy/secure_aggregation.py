"""The ``secure_aggregation`` config section (SecAgg+, Bell et al., CCS 2020, as Flower implements
it) and the numbers one round of it runs with. No flwr import: configs validate without Flower;
the protocol itself is ``graphfed.runtime.secagg``.

Each sampled client masks (weight * update, weight), quantised, so that the server learns only
their sums; the server divides the two. Payloads that are sums in the algorithm go through the
same protocol with weight 1 (``SumRequest``, ``SumsSetup``, ``SumsFit``): the server learns only
their total. A client's secrets are split into ``shares`` Shamir
shares held by its neighbours (every sampled client by default), ``threshold`` of which
reconstruct them: up to ``shares - threshold`` of a client's neighbours may drop out of a round
after the key exchange and the round still completes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Protocol, runtime_checkable

import numpy as np
import torch
from pydantic import BaseModel, Field

from graphfed.messages import Message
from graphfed.tensors import Params
from graphfed.validation import OPTIONS


class SecureAggregationOptions(BaseModel):
    """SecAgg+ over the clients a round samples (k = clients_per_round). Flower's names:
    ``quantization_range`` = 2**quantization_bits, ``modulus_range`` = 2**modulus_bits,
    ``num_shares`` = shares, ``reconstruction_threshold`` = threshold (counts, not fractions)."""

    model_config = OPTIONS

    enabled: bool = Field(False, description="mask every fit reply so that the server learns "
                          "only the weighted sum of the updates (averaging family), or only the "
                          "sum of a payload that is one (FedGCN's setup, FedProto's "
                          "prototypes); Flower and in-process alike")
    threshold: int | None = Field(None, ge=2, description="shares that reconstruct a client's "
                                  "secrets, a count of clients: the fewest of a client's "
                                  "neighbours that must stay to the end of a round, and one more "
                                  "than the clients a curious server must corrupt to unmask one "
                                  "(None: a majority, shares // 2 + 1)")
    shares: int | None = Field(None, ge=3, description="neighbours a client shares its secrets "
                               "with, itself included (None: every sampled client; fewer is "
                               "SecAgg+'s sparse graph and must be odd)")
    clipping_range: float = Field(8.0, gt=0.0, description="c: each coordinate of a client's "
                                  "weighted update (update * weight / largest weight) and its "
                                  "weighted training loss is clipped to [-c, c] before "
                                  "quantisation")
    quantization_bits: int = Field(22, ge=1, le=31, description="[-c, c] is quantised to "
                                   "integers 0..2**bits (Flower's quantization_range = 2**bits)")
    modulus_bits: int = Field(32, ge=2, le=32, description="masks and sums are taken modulo "
                              "2**bits (Flower's modulus_range); clients per round * "
                              "2**quantization_bits must stay below it")


@dataclass(frozen=True)
class SecAggPlan:
    """One round's SecAgg+ numbers, as the protocol's setup stage sends them (Flower's keys)."""

    sampled: int
    shares: int
    threshold: int
    clipping_range: float
    target_range: int
    mod_range: int
    max_weight: float


def resolved_shares(options: SecureAggregationOptions, sampled: int) -> int:
    return sampled if options.shares is None else options.shares


def resolved_threshold(options: SecureAggregationOptions, sampled: int) -> int:
    if options.threshold is not None:
        return options.threshold
    return max(2, resolved_shares(options, sampled) // 2 + 1)


def check_secure_aggregation(options: SecureAggregationOptions, sampled: int,
                             who: str = "a round samples (num_clients * client_fraction)"
                             ) -> None:
    """Raise ``ValueError`` (one line) when ``options`` cannot run over ``sampled`` clients a
    round (``who`` says which: a fit round's sample, or every client of a setup exchange):
    too few clients, a threshold or share count above them, sums that would overflow."""
    if sampled < 2:
        raise ValueError(f"secure_aggregation needs at least 2 clients a round (the sum of one "
                         f"is its update); a round samples {sampled}")
    shares = resolved_shares(options, sampled)
    if shares > sampled:
        raise ValueError(f"secure_aggregation.shares={shares} exceeds the {sampled} clients "
                         f"{who}")
    if shares < sampled and shares % 2 == 0:
        raise ValueError(f"secure_aggregation.shares={shares} must be odd (a client and as many "
                         "neighbours on each side of SecAgg+'s ring), or every sampled client")
    threshold = resolved_threshold(options, sampled)
    if threshold > shares:
        holders = (f"the {sampled} clients {who}" if options.shares is None
                   else f"secure_aggregation.shares={shares}")
        raise ValueError(f"secure_aggregation.threshold={threshold} exceeds {holders}, who "
                         "hold each client's shares: no round could unmask")
    if sampled >= 2 ** (options.modulus_bits - options.quantization_bits):
        raise ValueError(f"secure_aggregation: {sampled} clients * 2**quantization_bits="
                         f"{2 ** options.quantization_bits} overflows the modulus "
                         f"2**modulus_bits={2 ** options.modulus_bits}: lower quantization_bits "
                         "or raise modulus_bits (at most 32)")


def round_plan(options: SecureAggregationOptions, sampled: int, max_weight: float
               ) -> SecAggPlan:
    """The numbers of a round over ``sampled`` clients whose largest weight is ``max_weight``
    (each client's weight is scaled by it, so the weighted update stays within c)."""
    return SecAggPlan(sampled, resolved_shares(options, sampled),
                      resolved_threshold(options, sampled), options.clipping_range,
                      2 ** options.quantization_bits, 2 ** options.modulus_bits, max_weight)


def sum_plan(options: SecureAggregationOptions, clients: int, bound: float) -> SecAggPlan:
    """The numbers of a secure sum over ``clients``: every weight 1, and the payload's own
    public ``bound`` as the clipping range."""
    return replace(round_plan(options, clients, 1.0), clipping_range=bound)


@dataclass
class SecureSum:
    """What one round of secure aggregation reveals: the weighted mean of the contributors'
    updates (one float64 array per tensor the server sent) and of their training losses,
    who contributed, who dropped out (why), and the bytes the protocol moved."""

    means: list[np.ndarray]
    train_loss: float
    contributors: list[int]
    dropped: dict[int, str]
    bytes_up: int  # the masked vectors' payload: what the round record counts
    wire: tuple[int, int] | None = None  # (up, down) of every stage, where a network carried it

    def mean_update(self, like: Params) -> Params:
        """The means as tensors shaped like ``like`` (the model the clients were sent)."""
        return {k: torch.from_numpy(np.asarray(v, dtype=np.float64)).reshape(like[k].shape)
                for k, v in zip(like, self.means, strict=True)}


@dataclass
class SecureTotal:
    """What a secure sum reveals: the sum of the contributors' summands (float64 arrays, one a
    tensor of the ``SumRequest``), the mean of their training losses on a fit round (None on a
    setup exchange), who contributed, who dropped out (why), and the bytes it moved."""

    sums: list[np.ndarray]
    train_loss: float | None
    contributors: list[int]
    dropped: dict[int, str]
    bytes_up: int
    wire: tuple[int, int] | None = None

    def as_params(self, shapes: dict[str, tuple[int, ...]]) -> Params:
        """The sums as float64 tensors named and shaped as the request declared them."""
        return {name: torch.from_numpy(np.asarray(v, dtype=np.float64)).reshape(shape)
                for (name, shape), v in zip(shapes.items(), self.sums, strict=True)}


@dataclass
class SumRequest:
    """A payload the server needs only the sum of. ``messages``: what each client is sent; each
    answers with float tensors named and shaped as ``shapes`` (alike at every client, in that
    order), every entry within [-bound, bound]. ``bound`` is public (every client is told it):
    the algorithm chooses it per payload, from what the server may know (the configured
    clipping range for values scaled to it, or a first exchange of public metadata); an entry
    beyond it is clipped, as an update is clipped to c."""

    messages: dict[int, Message]
    shapes: dict[str, tuple[int, ...]]
    bound: float


@runtime_checkable
class SumsSetup(Protocol):
    """A server whose setup exchange, after its public part (``configure_setup`` and
    ``aggregate_setup`` as usual), needs only the sum of a payload: under secure aggregation a
    second setup exchange sums it (the clients answer it with ``answer_setup``)."""

    def configure_setup_sum(self, clients: list[int]) -> SumRequest | None:
        """The summed exchange, once the public replies were aggregated (None: none)."""

    def aggregate_setup_sum(self, total: Params, contributors: list[int]) -> None:
        """Take the total of the contributors' summands."""


@runtime_checkable
class SumsFit(Protocol):
    """A server whose fit aggregate needs only the sum of the replies: under secure aggregation
    each sampled client's ``fit`` answers with its summand (its training loss is summed beside
    it, and the round records the mean)."""

    def configure_fit_sum(self, rnd: int, clients: list[int]) -> SumRequest:
        """The fit round's request."""

    def aggregate_fit_sum(self, rnd: int, total: Params, contributors: list[int]) -> None:
        """Take the total of the contributors' summands in place of their replies."""


class AveragesUpdates(Protocol):
    """A server whose aggregate is the weighted mean of its clients' updates (FedAvg's): what
    secure aggregation can replace the replies by."""

    def secure_weights(self, clients: list[int]) -> dict[int, int]:
        """Each client's weight, which it applies itself before masking."""

    def aggregate_mean(self, rnd: int, mean: Params, contributors: list[int]) -> None:
        """Take the round's weighted mean update of ``contributors`` in place of the
        replies."""
