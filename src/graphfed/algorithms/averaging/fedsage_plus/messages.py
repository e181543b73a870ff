"""What FedSage+'s messages carry beside the classifier: the generator (prefixed tensors) and
two flags."""

from __future__ import annotations

from torch import Tensor

from graphfed.mechanisms.updates import under_prefix
from graphfed.messages import Message

GEN = "gen."  # prefix of the generator's tensors in a message
TRAIN_GEN = "fedsage+_train_gen"  # scalar: the client trains the received generator
MENDED = "fedsage+_mended"  # reply scalar: the client has mended its graph
GEN_LOSS = "gen_loss"  # reply scalar: NeighGen's loss in the client's last local step


def split_message(message: Message) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """(classifier tensors, generator tensors without the prefix)."""
    return ({k: v for k, v in message.tensors.items() if not k.startswith(GEN)},
            under_prefix(message.tensors, GEN))
