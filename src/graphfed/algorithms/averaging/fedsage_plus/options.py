"""FedSage+'s options (FederatedScope's and FedEgo's settings as defaults)."""

from __future__ import annotations

from pydantic import Field

from graphfed.algorithms.averaging.fedavg import FedAvgOptions
from graphfed.validation import Seed


class FedSagePlusOptions(FedAvgOptions):
    hide_portion: float = Field(0.5, ge=0.0, lt=1.0, description="share of a client's nodes "
                                "hidden to make the impaired graph NeighGen learns from")
    num_pred: int = Field(5, ge=1, description="generated neighbours per node at most (fGen "
                          "outputs this many feature vectors)")
    gen_rounds: int = Field(20, ge=0, description="federated rounds of NeighGen training "
                            "(FedEgo: 20; 0: no generator, plain FedSage)")
    gen_local_steps: int = Field(2, ge=1, description="local NeighGen epochs (full-graph "
                                 "steps) per generator round (FedEgo's 20 x 2)")
    gen_hidden: int = Field(128, ge=1, description="NeighGen encoder / latent size and its "
                            "internal classifier's hidden size (FederatedScope: 128)")
    fgen_hidden: list[int] = Field([256, 2048], description="fGen's hidden layer sizes "
                                   "(FederatedScope: 256, 2048)")
    gen_dropout: float = Field(0.5, ge=0.0, lt=1.0, description="dropout in NeighGen")
    gen_noise: float = Field(1.0, ge=0.0, description="std of the Gaussian noise added to the "
                             "latent before fGen while training")
    gen_lr: float = Field(0.01, gt=0.0, description="Adam learning rate of NeighGen")
    gen_weight_decay: float = Field(5e-4, ge=0.0, description="Adam weight decay of NeighGen")
    num_weight: float = Field(1.0, ge=0.0, description="weight of dGen's count loss (a)")
    feat_weight: float = Field(1.0, ge=0.0, description="weight of fGen's greedy feature loss (b)")
    clf_weight: float = Field(1.0, ge=0.0, description="weight of the classification loss on "
                              "the generator-mended impaired graph (c)")
    gen_seed: Seed = Field(0, description="seed of NeighGen's initialisation, shared by all "
                          "clients so that their generators start identical")
    classifier_during_gen: bool = Field(True, description="train the classifier (on the "
                                        "unmended graph) in the fit rounds that also carry "
                                        "generator training; false: leave it untouched there")
