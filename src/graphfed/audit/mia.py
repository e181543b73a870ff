"""Membership inference by a loss threshold (Yeom et al., CSF 2018): a model fits the samples
it trained on better than others, so a candidate's loss under the released model ranks it.

Members are each client's training items (nodes, or graphs at graph level), non-members its
test items, as many of one as of the other (the larger set subsampled, seeded). At node level
the model runs on the client's own graph as deployed, test nodes included: the standard
transductive setting of membership inference against GNNs, where membership means a node's
label was trained on, not that the node was absent from the graph."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from graphfed.audit.scoring import AttackResult, attack_result, balanced_rows, sample_losses
from graphfed.audit.target import AuditedRun
from graphfed.errors import GraphfedError

THREAT_MODEL = ("the released model (its parameters, or black-box losses of it), run on each "
                "client's data as deployed; the candidates (a client's training and test items) "
                "with their labels")


@dataclass(frozen=True)
class Candidates:
    """One client's balanced candidates: positions in its train split (members) and in its
    test split (non-members)."""

    client: int
    members: np.ndarray
    non_members: np.ndarray


def candidates(run: AuditedRun) -> list[Candidates]:
    """Every client's balanced candidates, drawn from the audited seed's stream (the same for
    each attack that scores them); clients without training or test items have none."""
    out = []
    for client, raw in enumerate(run.fed.data.clients):
        n_train, n_test = raw.num_samples("train"), raw.num_samples("test")
        if n_train and n_test:
            out.append(Candidates(client, *balanced_rows(n_train, n_test, run.rng(client))))
    return out


def loss_scores(member_logits: Tensor, member_targets: Tensor, other_logits: Tensor,
                other_targets: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The attack's scores (minus each candidate's loss: higher, more likely a member) of
    members then non-members, and which are members."""
    losses = torch.cat([sample_losses(member_logits, member_targets),
                        sample_losses(other_logits, other_targets)])
    positive = np.r_[np.ones(len(member_targets), bool), np.zeros(len(other_targets), bool)]
    return -losses.cpu().numpy(), positive


def loss_threshold(run: AuditedRun) -> AttackResult:
    """The loss-threshold attack on every client's candidates, pooled into one ROC."""
    scores, positive = [], []
    for chosen in candidates(run):
        out = run.outputs(chosen.client, ("train", "test"))
        (train_logits, train_y), (test_logits, test_y) = out["train"], out["test"]
        member = torch.as_tensor(chosen.members, device=train_logits.device)
        other = torch.as_tensor(chosen.non_members, device=test_logits.device)
        s, p = loss_scores(train_logits[member], train_y[member], test_logits[other],
                           test_y[other])
        scores.append(s)
        positive.append(p)
    if not scores:
        raise GraphfedError("membership inference: no client holds both training and test "
                            "items")
    return attack_result("mia", np.concatenate(scores), np.concatenate(positive), THREAT_MODEL)
