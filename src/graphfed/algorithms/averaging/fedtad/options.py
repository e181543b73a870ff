"""FedTAD's options: the paper's settings, and the authors' code's (``zyl24/FedTAD``
``train_fedtad.py``; OpenFGL's ``flcore/fedtad/fedtad_config.py`` has the same values) where
the paper leaves them open."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from graphfed.algorithms.averaging.fedavg import FedAvgOptions

ReliabilityNorm = Literal["clients", "classes"]


class FedTADOptions(FedAvgOptions):
    walk_length: int = Field(5, ge=1, description="K, the random-walk steps of the topology "
                             "embedding's landing probabilities (code: max_walk_length 5)")
    reliability_norm: ReliabilityNorm = Field(
        "clients", description="how the class-wise reliabilities are normalised: over the "
        "round's clients per class (authors' code: ckr / ckr.sum(0) over the client axis) or "
        "over a client's classes (OpenFGL: the same line on one client's vector)")
    num_gen: int = Field(100, ge=1, description="nodes of the pseudo graph, split evenly over "
                         "the classes, the remainder to the last (code: num_gen 100)")
    topk: int = Field(5, ge=1, description="k of the pseudo graph's k-nearest-neighbour edges "
                      "by cosine similarity, the node itself included (code: topk 5)")
    noise_dim: int = Field(32, ge=1, description="dimension of the generator's noise z "
                           "(code: 32)")
    generator_hidden: tuple[int, ...] = Field((64, 128, 256), min_length=1, description="the "
                                              "generator's hidden widths (code: 64, 128, 256)")
    generator_dropout: float = Field(0.0, ge=0.0, lt=1.0, description="the generator's "
                                     "dropout (code: 0)")
    glb_epochs: int = Field(5, ge=0, description="server distillation epochs per round, each "
                            "with fresh noise (code: glb_epochs 5; 0: FedAvg)")
    it_g: int = Field(1, ge=0, description="generator steps per epoch (code: it_g 1)")
    it_d: int = Field(5, ge=0, description="global-model steps per epoch (code: it_d 5)")
    lr_g: float = Field(1e-3, gt=0.0, description="the generator's Adam step size (code: lr_g "
                        "1e-3)")
    lr_d: float = Field(1e-3, gt=0.0, description="the global model's Adam step size in "
                        "distillation (code: lr_d 1e-3)")
    server_weight_decay: float | None = Field(
        None, ge=0.0, description="weight decay of both server Adams; unset: the clients' "
        "optimizer.weight_decay (the code's args.weight_decay)")
    lam1: float = Field(1.0, ge=0.0, description="λ1, weight of the generator's reliability-"
                        "weighted cross-entropy (code: lam1 1)")
    lam2: float = Field(1.0, ge=0.0, description="λ2, weight of the generator's diversity "
                        "loss (code: lam2 1)")
