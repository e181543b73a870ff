"""The config sections ``dp`` (DP-FedAvg) and ``privacy`` (the ledger's accountant and budget)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field, model_validator

from graphfed.validation import OPTIONS

COUNT_NOISE_SHARE = 20  # Andrew et al. 2021, Sec. 3: the clipped count's noise std m / 20


class DPOptions(BaseModel):
    """Client-level DP-FedAvg: every client's update (reply minus the model it was sent)
    clipped to L2 norm ``clip``, averaged uniformly, and Gaussian noise of std
    ``noise_multiplier * clip`` on the sum, added by the server (``where=server``) or by each
    client on its own clipped update (``where=client``)."""

    model_config = OPTIONS

    enabled: bool | None = Field(None, description="apply DP-FedAvg (None: when "
                                 "noise_multiplier is set)")
    noise_multiplier: float | None = Field(None, ge=0.0, description="sigma: the noise std "
                                           "over the clip bound (0: clipping only, no "
                                           "privacy)")
    clip: float = Field(1.0, gt=0.0, description="C: the bound on each update's L2 norm "
                        "(adaptive clipping: its first value)")
    clipping: Literal["fixed", "adaptive"] = Field(
        "fixed", description="fixed C, or adaptive: C follows target_quantile of the update "
        "norms (Andrew et al. 2021, Alg. 1)")
    target_quantile: float = Field(0.5, ge=0.0, le=1.0, description="adaptive: the share of "
                                   "updates meant to fall under C")
    clip_lr: float = Field(0.2, gt=0.0, description="adaptive: the geometric step of C per "
                           "round (eta_C)")
    count_stddev: float | None = Field(None, gt=0.0, description="adaptive: the noise std of "
                                       "the count of unclipped updates (None: clients per "
                                       "round / 20)")
    where: Literal["server", "client"] = Field(
        "server", description="server: the server noises the sum; client: each client noises "
        "its own clipped update (local DP, no trust in the server)")
    delta: float = Field(1e-5, gt=0.0, lt=1.0, description="the delta every epsilon of the "
                         "ledger is stated for")

    @model_validator(mode="after")
    def _resolve(self) -> DPOptions:
        if self.enabled is None:
            self.enabled = self.noise_multiplier is not None
        if self.enabled and self.noise_multiplier is None:
            raise ValueError("dp.enabled needs dp.noise_multiplier (sigma >= 0)")
        return self


class PrivacyOptions(BaseModel):
    """How the ledger composes a run's releases, and the budget that stops a run."""

    model_config = OPTIONS

    accountant: Literal["rdp", "pld"] = Field(
        "rdp", description="the dp-accounting accountant of the summary's epsilon (both are "
        "reported for the total)")
    budget_epsilon: float | None = Field(None, gt=0.0, description="stop the run before the "
                                         "round after which epsilon would exceed this")


@dataclass(frozen=True)
class DPRun:
    """The ``dp`` section as a run applies it: its options and the m clients a round samples
    (the fixed denominator of DP-FedAvg's mean, and m / N its sampling rate)."""

    options: DPOptions
    clients_per_round: int


def count_stddev(options: DPOptions, clients_per_round: int) -> float:
    """sigma_b, the noise std of the adaptive clip's count of unclipped updates."""
    if options.count_stddev is not None:
        return options.count_stddev
    return clients_per_round / COUNT_NOISE_SHARE


def update_noise_multiplier(options: DPOptions, clients_per_round: int) -> float:
    """z_Delta, the noise multiplier of the updates' sum. With adaptive clipping the count
    spends part of the budget: z_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2) keeps the pair as private
    as one Gaussian of multiplier z (Andrew et al. 2021, Thm. 1). Raises ``ValueError`` when
    2 sigma_b <= z (the count alone would spend all of it)."""
    z = options.noise_multiplier or 0.0
    if options.clipping == "fixed" or z == 0.0:
        return z
    twice = 2.0 * count_stddev(options, clients_per_round)
    if twice <= z:
        raise ValueError(f"dp.clipping=adaptive: the count's noise std {twice / 2:g} "
                         f"(dp.count_stddev) must exceed dp.noise_multiplier / 2 = {z / 2:g}, "
                         "or the count alone spends the whole budget")
    return 1.0 / math.sqrt(z ** -2 - twice ** -2)
