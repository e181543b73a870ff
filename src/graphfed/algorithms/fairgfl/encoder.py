"""The server's public encoder (spec §2, App. F-B): an auto-encoder trained on the server's own
public nodes before round 1, whose encoder half every client receives once in the setup exchange
(its bytes counted there) and applies to its node features before privatising them."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from graphfed.algorithms.fairgfl.options import ENCODER, FairGFLOptions
from graphfed.mechanisms.updates import under_prefix, with_prefix
from graphfed.models.autoencoder import FeatureAutoencoder


def train_encoder(x: Tensor, options: FairGFLOptions) -> FeatureAutoencoder:
    """Full-batch Adam on the reconstruction error of the public features ``x`` for
    ``encoder_epochs`` epochs (0: the encoder as initialised, App. F-B's worst case)."""
    model = FeatureAutoencoder(x.shape[1], options.encoder_hidden, options.code_dim)
    optimizer = torch.optim.Adam(model.parameters(), lr=options.encoder_lr)
    model.train()
    for _ in range(options.encoder_epochs):
        optimizer.zero_grad()
        F.mse_loss(model(x), x).backward()
        optimizer.step()
    model.eval()
    return model


def encoder_message(model: FeatureAutoencoder) -> dict[str, Tensor]:
    return with_prefix(model.encoder_params(), ENCODER)


def encoder_from(tensors: dict[str, Tensor], in_dim: int, options: FairGFLOptions
                 ) -> FeatureAutoencoder:
    """The auto-encoder whose encoder half is the one the server sent (the decoder stays at its
    initialisation: a client never decodes)."""
    model = FeatureAutoencoder(in_dim, options.encoder_hidden, options.code_dim)
    model.encoder.load_state_dict(under_prefix(tensors, ENCODER))
    return model.eval()


def encoder_spec(in_dim: int, options: FairGFLOptions) -> dict[str, tuple[tuple[int, ...],
                                                                          torch.dtype]]:
    """The shapes of the encoder message, which a client checks before loading it."""
    model = FeatureAutoencoder(in_dim, options.encoder_hidden, options.code_dim)
    return {f"{ENCODER}{k}": (tuple(v.shape), v.dtype)
            for k, v in model.encoder.state_dict().items()}
