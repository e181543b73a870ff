"""GPFL's graph-level split (spec gpfl.md §4 "Partition", §7.2.3): equal-size clients with
capped Dirichlet label priors, then a stratified k-fold inside every client and no validation set.

Both stages draw from NumPy's legacy ``RandomState(seed)``, the generator the authors' code seeds
(``np.random.seed`` in ``dataprocess/data_split.py:label_skew_balance``; scikit-learn's
``StratifiedKFold(shuffle=True, random_state=seed)`` builds a fresh one per client), in the code's
order of draws, so the same seed gives the code's clients and folds (checked against the code's
procedure run with scikit-learn by ``benchmarks/verify_gpfl_split.py``).
"""

from __future__ import annotations

import numpy as np
import torch

from graphfed.data.partition.plan import TEST, TRAIN, SplitPlan
from graphfed.errors import GraphfedError

PRIOR_CAP = 0.95


def equal_sizes(total: int, num_clients: int) -> np.ndarray:
    """``floor(total / k)`` graphs per client, one more for each of the first ``total mod k``
    (``dataprocess/utils.py:cal_num``)."""
    sizes = np.full(num_clients, total // num_clients, dtype=np.int64)
    sizes[:total % num_clients] += 1
    return sizes


def capped_priors(alpha: float, num_classes: int, num_clients: int,
                  draws: np.random.RandomState, cap: float = PRIOR_CAP) -> np.ndarray:
    """One Dir(alpha * 1_C) class prior per client (one call for all, as the code draws them),
    each entry above ``cap`` cut to it and the excess shared equally by the entries that were at
    or below it (``dataprocess/utils.py:soft_dirichlet``: the share count includes an entry
    exactly at the cap, which then gets none, a measure-zero case kept as the code has it)."""
    priors = draws.dirichlet([alpha] * num_classes, size=num_clients)
    if np.isnan(priors).any():  # NumPy's legacy draw is 0/0 when every gamma underflows
        raise GraphfedError(
            f"gpfl_dirichlet partition: alpha={alpha} is too small for NumPy's legacy Dirichlet "
            "draw (every component underflowed to 0, so a prior is NaN); raise partition.alpha")
    for row in priors:
        excess = np.maximum(row - cap, 0.0).sum()
        sharers = int((row <= cap).sum())
        row[row > cap] = cap
        row[row < cap] += excess / sharers
    return priors


def fill_clients(labels: np.ndarray, priors: np.ndarray, sizes: np.ndarray,
                 draws: np.random.RandomState) -> list[np.ndarray]:
    """The code's fill loop (``data_split.py:30-42``): draw a client (a full one wastes the draw),
    draw a class from its cumulative prior (again while that class is used up), and give the
    client the last unused graph of that class in dataset order. A client's graphs are stored
    from its last slot backwards, as the code stores them; the folds depend on that order."""
    num_classes = priors.shape[1]
    pools = [np.flatnonzero(labels == c) for c in range(num_classes)]
    left = np.array([len(p) for p in pools])
    room = sizes.copy()
    clients = [np.zeros(s, dtype=np.int64) for s in sizes]
    cumulative = np.cumsum(priors, axis=1)
    while room.sum():
        client = draws.randint(len(sizes))
        if room[client] <= 0:
            continue
        room[client] -= 1
        cls = _draw_class(cumulative[client], left, draws, client)
        left[cls] -= 1
        clients[client][room[client]] = pools[cls][left[cls]]
    return clients


def _draw_class(cumulative: np.ndarray, left: np.ndarray, draws: np.random.RandomState,
                client: int) -> int:
    """A class with graphs left, drawn as ``argmax(u <= cumsum(prior))`` until one is; refused
    where the prior gives none of them any mass (the code would loop forever)."""
    while True:
        cls = int(np.argmax(draws.uniform() <= cumulative))
        if left[cls] > 0:
            return cls
        if not _mass(cumulative)[left > 0].any():
            raise GraphfedError(
                f"gpfl_dirichlet partition: client {client}'s class prior gives no weight to the "
                "classes that still have graphs; raise partition.alpha")


def _mass(cumulative: np.ndarray) -> np.ndarray:
    """Whether each class can be drawn: its cumulative step is positive (class 0 also takes the
    draws above the last step, which ``argmax`` of all-False sends to it)."""
    steps = np.diff(cumulative, prepend=0.0)
    steps[0] += 1.0 - cumulative[-1]
    return steps > 0


def stratified_folds(labels: np.ndarray, folds: int, seed: int) -> np.ndarray:
    """The test fold of each graph under scikit-learn's ``StratifiedKFold(folds, shuffle=True,
    random_state=seed)`` (its algorithm since 0.22, reimplemented: scikit-learn is not a graphfed
    dependency): classes numbered by first appearance; fold i takes, of each class, as many
    graphs as the class has at positions i, i+folds, ... of the class-sorted labels; each class's
    fold list is then shuffled by one fresh ``RandomState(seed)``, class after class."""
    _, first, inverse = np.unique(labels, return_index=True, return_inverse=True)
    encoded = np.argsort(np.argsort(first))[inverse]
    num_classes = len(first)
    ordered = np.sort(encoded)
    per_fold = np.stack([np.bincount(ordered[i::folds], minlength=num_classes)
                         for i in range(folds)])
    draws = np.random.RandomState(seed)
    assignment = np.empty(len(labels), dtype=np.int64)
    for cls in range(num_classes):
        fold_of = np.repeat(np.arange(folds), per_fold[:, cls])
        draws.shuffle(fold_of)
        assignment[encoded == cls] = fold_of
    return assignment


def gpfl_split(labels: torch.Tensor, num_clients: int, alpha: float, folds: int, fold: int,
               seed: int) -> SplitPlan:
    """GPFL's ``label_skew_balance`` clients, each split by its stratified ``fold``: that fold
    is its test set, the other ``folds - 1`` its training set (no validation, no global test)."""
    y = labels.cpu().numpy()
    sizes = equal_sizes(len(y), num_clients)
    if sizes.min() < folds:
        raise GraphfedError(
            f"gpfl_dirichlet partition: {len(y)} graphs over {num_clients} clients leaves "
            f"{sizes.min()} per client, fewer than partition.folds={folds}; lower num_clients "
            "or partition.folds")
    draws = np.random.RandomState(seed)
    priors = capped_priors(alpha, int(y.max()) + 1, num_clients, draws)
    clients = fill_clients(y, priors, sizes, draws)
    splits = [torch.from_numpy(np.where(stratified_folds(y[ids], folds, seed) == fold,
                                        TEST, TRAIN)) for ids in clients]
    return SplitPlan(torch.empty(0, dtype=torch.long),
                     [torch.from_numpy(ids) for ids in clients], splits)
