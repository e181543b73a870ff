"""FedTGP: the adaptive margin follows Eq. 4, the server's contrastive training separates the
global prototypes and pulls each to its class's uploads, and every class gets a prototype."""

import torch

from graphfed.algorithms.personalized.fedproto import embeddings
from graphfed.algorithms.personalized.fedtgp import (
    adaptive_margin,
    contrastive_loss,
    generate,
)
from graphfed.mechanisms.prototypes import class_prototypes
from tests.conftest import evaluated_after, require

CORA = ["dataset=Cora", "partition=metis", "num_clients=3", "device=cpu", "local_epochs=2"]


def test_margin_is_the_largest_nearest_centre_gap_capped_at_tau():
    """Centres 0, 3 and 10 on a line: nearest gaps 3, 3 and 7, so the margin is 7, or tau."""
    prototypes = torch.tensor([[0.0], [0.0], [3.0], [10.0]])
    labels = torch.tensor([0, 0, 1, 2])
    assert adaptive_margin(prototypes, labels, 100.0) == 7.0
    assert adaptive_margin(prototypes, labels, 5.0) == 5.0
    assert adaptive_margin(prototypes[:2], labels[:2], 5.0) == 5.0  # one class: tau


def test_the_margin_raises_the_loss_of_the_true_class():
    g = torch.Generator().manual_seed(0)
    uploaded, generated = torch.randn(6, 4, generator=g), torch.randn(3, 4, generator=g)
    labels = torch.tensor([0, 1, 2, 0, 1, 2])
    assert contrastive_loss(uploaded, labels, generated, 2.0) > contrastive_loss(
        uploaded, labels, generated, 0.0)


@require("Cora")
def test_server_training_brings_each_class_nearest_its_own_uploads():
    """After two rounds every class has a global prototype P = F(E), and most
    prototypes a client uploaded lie nearer its own class's global prototype than any other's
    (the contrastive loss of Eq. 5 at work)."""
    runtime, _ = evaluated_after(["algorithm=fedtgp", *CORA, "fedtgp.server_epochs=1000"],
                                 rounds=2)
    server = runtime.server
    assert bool((server.known == 1).all())
    assert torch.equal(server.prototypes, generate(server.generator))
    hits = total = 0
    for c in range(3):
        ctx = runtime.contexts[c]
        h, y = embeddings(ctx.state["params"], ctx, ctx.data, ("train",))["train"]
        local, counts = class_prototypes(h, y, 7)
        held = counts > 0
        nearest = torch.cdist(local[held], server.prototypes).argmin(1)
        hits += int((nearest == torch.nonzero(held).view(-1)).sum())
        total += int(held.sum())
    assert hits >= 0.6 * total, (hits, total)
