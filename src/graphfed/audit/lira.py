"""Offline LiRA (Carlini et al., IEEE S&P 2022, the offline variant): how unusual the released
model's confidence in a candidate's true class is among models that never trained on it.

Shadow models: graphfed trains whole federations of the audited run's recipe (its config:
algorithm, model, rounds, options, privacy) on the same partition, each from its own seed, but
with every client's training split replaced by held-out data: as many of the client's
validation items as it had training items (fewer if it has fewer), drawn per shadow, leaving
out any item that is a candidate of any client. Every candidate (each client's training and
test items) is thus OUT of every shadow, as the offline attack needs. At node level a shadow
runs on the same graphs: it sees the candidates' features and edges, never their labels.

Each candidate's logit-scaled confidence log(p / (1 - p)) of its true class under the shadows
fits a Gaussian N(mu, sigma^2); the score is the one-sided test of the released model's
confidence against it, Phi((phi - mu) / sigma), ranked by its argument (the probability itself
rounds to 1 for confident members). Few shadows estimate a candidate's variance poorly, so below
``PER_CANDIDATE_VARIANCE`` shadows sigma is pooled over the candidates (Carlini et al.'s fixed
variance) and only mu is the candidate's own.

Shadows are cached in the seed's ``audit/`` folder (``shadow-<k>.json``: the confidences of
every candidate, keyed by the run's fingerprint and the shadow's seed), so a second audit, or
one with more shadows, trains only what is missing."""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from graphfed.audit.mia import candidates
from graphfed.audit.scoring import AttackResult, attack_result, logit_confidence
from graphfed.audit.target import AuditedRun, item_ids, released_outputs, released_params
from graphfed.data.federated import ClientData, FederatedData, GraphClient, NodeClient
from graphfed.errors import GraphfedError
from graphfed.experiment import build_federation
from graphfed.serialization import atomic_write

PER_CANDIDATE_VARIANCE = 16  # Carlini et al. fit a variance per example only with many shadows
THREAT_MODEL = ("black-box posteriors of the released model on the candidates, their labels, "
                "the run's recipe (config.yaml) and shadow data: each client's validation items "
                "that are no candidate, on which graphfed trains {shadows} shadow federations "
                "(every candidate OUT)")

Progress = Callable[[str], None]


def lira_scores(target: np.ndarray, shadows: np.ndarray) -> np.ndarray:
    """Each candidate's offline-LiRA score: (phi - mu) / sigma of its ``target`` confidence
    against its ``shadows`` confidences (shadows x candidates), sigma pooled over the
    candidates below ``PER_CANDIDATE_VARIANCE`` shadows; at least two shadows."""
    mu = shadows.mean(axis=0)
    variance = shadows.var(axis=0, ddof=1)
    if len(shadows) < PER_CANDIDATE_VARIANCE:
        variance = np.full_like(variance, variance.mean())
    return (target - mu) / np.sqrt(np.maximum(variance, 1e-12))


def shadow_data(data: FederatedData, rng: np.random.Generator) -> FederatedData:
    """``data`` with each client's training split replaced by held-out items: up to as many
    of its validation items as it trained on, none a candidate of any client; the former
    training and test items (and validation items that are another client's candidates)
    become test items."""
    candidate_ids = torch.cat([item_ids(c, s) for c in data.clients for s in ("train", "test")])
    clients = []
    for client_id, raw in enumerate(data.clients):
        val = item_ids(raw, "val")
        pool = np.nonzero(~np.isin(val.numpy(), candidate_ids.numpy()))[0]
        if not len(pool):
            raise GraphfedError(f"LiRA: client {client_id} holds no validation items outside "
                                "the candidates to train shadow models on; the partition needs "
                                "a validation split")
        n_train = raw.num_samples("train")
        chosen = np.zeros(len(val), bool)
        chosen[rng.choice(pool, min(n_train, len(pool)), replace=False)] = True
        kept = np.zeros(len(val), bool)  # no candidate: may stay a validation item
        kept[pool] = True
        clients.append(_resplit(raw, torch.as_tensor(chosen), torch.as_tensor(kept)))
    return replace(data, clients=clients)


def _resplit(raw: ClientData, train: Tensor, kept: Tensor) -> ClientData:
    """``raw`` with the validation items ``train`` as its training split, the other ``kept``
    ones as its validation split and everything else as its test split (masks over the
    validation items, in their order)."""
    if isinstance(raw, NodeClient):
        graph = copy.copy(raw.graph)  # its own masks, the same tensors otherwise
        val_nodes = torch.nonzero(raw.graph.val_mask).view(-1)
        graph.train_mask = torch.zeros_like(raw.graph.val_mask)
        graph.train_mask[val_nodes[train]] = True
        graph.val_mask = torch.zeros_like(raw.graph.val_mask)
        graph.val_mask[val_nodes[kept & ~train]] = True
        graph.test_mask = ~(graph.train_mask | graph.val_mask)
        return NodeClient(graph, raw.global_ids, raw.lost_edges)
    assert isinstance(raw, GraphClient)
    val_graphs, val_ids = raw.graphs["val"], raw.global_ids["val"]
    rest = ~train & ~kept
    graphs = {"train": _picked(val_graphs, train), "val": _picked(val_graphs, kept & ~train),
              "test": raw.graphs["train"] + raw.graphs["test"] + _picked(val_graphs, rest)}
    ids = {"train": val_ids[train], "val": val_ids[kept & ~train],
           "test": torch.cat([raw.global_ids["train"], raw.global_ids["test"], val_ids[rest]])}
    return GraphClient(graphs, ids)


def _picked(items: list, mask: Tensor) -> list:
    return [item for item, keep in zip(items, mask.tolist(), strict=True) if keep]


def shadow_seed(seed: int, shadow: int) -> int:
    """The seed of the audited seed's ``shadow``-th shadow federation (not a seed of the run)."""
    return int(np.random.SeedSequence([seed, shadow, 0x5AD0]).generate_state(1)[0])


def train_shadow(run: AuditedRun, shadow: int) -> dict[int, tuple[Tensor, Tensor]]:
    """One shadow federation trained to the audited round: per client the dataset ids of its
    test items (every candidate of the client) and their logit-scaled confidences under the
    model the shadow releases."""
    seed = shadow_seed(run.seed, shadow)
    data = shadow_data(run.fed.data, np.random.default_rng(seed))
    fed = build_federation(run.config, seed, data=data)
    fed.setup()
    for rnd in range(1, run.rounds + 1):
        fed.fit_round(rnd)
    _, params = released_params(fed, run.rounds)
    out = {}
    for client, raw in enumerate(data.clients):
        if raw.num_samples("test"):
            logits, targets = released_outputs(fed, params, client, ("test",))["test"]
            out[client] = (item_ids(raw, "test"), logit_confidence(logits, targets).cpu())
    return out


def _cache_key(run: AuditedRun, shadow: int) -> str:
    what = {"fingerprint": run.fed.fingerprint, "rounds": run.rounds,
            "shadow_seed": shadow_seed(run.seed, shadow)}
    return hashlib.sha256(json.dumps(what, sort_keys=True, default=str).encode()).hexdigest()


def cached_shadow(run: AuditedRun, shadow: int, progress: Progress
                  ) -> dict[int, tuple[Tensor, Tensor]]:
    """Shadow ``shadow``'s confidences, from the seed's ``audit/`` cache when it holds them
    for this run, else trained and cached. The cache is plain JSON: reading it runs nothing."""
    path = cache_path(run.seed_dir, shadow)
    key = _cache_key(run, shadow)
    try:
        stored = json.loads(path.read_text())
        if stored.get("key") == key:
            return {int(c): (torch.tensor(v["ids"], dtype=torch.long),
                             torch.tensor(v["confidence"], dtype=torch.float64))
                    for c, v in stored["clients"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass  # missing, of another run or damaged: trained again
    progress(f"training shadow federation {shadow + 1} (seed {shadow_seed(run.seed, shadow)})")
    trained = train_shadow(run, shadow)
    clients = {str(c): {"ids": ids.tolist(), "confidence": phi.tolist()}
               for c, (ids, phi) in trained.items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, json.dumps({"key": key, "clients": clients}).encode())
    return trained


def cache_path(seed_dir: Path, shadow: int) -> Path:
    return seed_dir / "audit" / f"shadow-{shadow}.json"


def _lookup(ids: Tensor, values: Tensor, wanted: Tensor) -> Tensor:
    """``values`` of the ``wanted`` ids (each present in ``ids``)."""
    order = torch.argsort(ids)
    at = torch.searchsorted(ids[order], wanted)
    return values[order[at]]


def offline_lira(run: AuditedRun, shadows: int, progress: Progress) -> AttackResult:
    """Offline LiRA on every client's balanced candidates (those the loss-threshold attack
    scores), with ``shadows`` shadow federations, pooled into one ROC."""
    if shadows < 2:
        raise GraphfedError("LiRA fits a Gaussian per candidate: give --shadows 2 or more")
    trained = [cached_shadow(run, k, progress) for k in range(shadows)]
    target, shadow_phi, positive = [], [], []
    for chosen in candidates(run):
        raw = run.fed.data.clients[chosen.client]
        out = run.outputs(chosen.client, ("train", "test"))
        for split, rows, member in (("train", chosen.members, True),
                                    ("test", chosen.non_members, False)):
            logits, targets = out[split]
            at = torch.as_tensor(rows, device=logits.device)
            target.append(logit_confidence(logits[at], targets[at]).cpu().numpy())
            wanted = item_ids(raw, split)[torch.as_tensor(rows)]
            shadow_phi.append(np.stack([_lookup(*t[chosen.client], wanted).numpy()
                                        for t in trained]))
            positive.append(np.full(len(rows), member))
    scores = lira_scores(np.concatenate(target), np.concatenate(shadow_phi, axis=1))
    return attack_result("lira", scores, np.concatenate(positive),
                         THREAT_MODEL.format(shadows=shadows))
