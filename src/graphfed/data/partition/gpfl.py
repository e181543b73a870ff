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
    _check_sizes(len(y), num_clients, folds, "gpfl_dirichlet")
    sizes = equal_sizes(len(y), num_clients)
    draws = np.random.RandomState(seed)
    priors = capped_priors(alpha, int(y.max()) + 1, num_clients, draws)
    return _fold_plan(y, fill_clients(y, priors, sizes, draws), folds, fold, seed)


TOY_KEEP = 10  # graphs of each class the toy split leaves to the other group at least


def toy_groups(labels: np.ndarray, rate: float, draws: np.random.RandomState
               ) -> list[np.ndarray]:
    """The code's two-group ``toy_split`` rule (``data_split.py:59-88``): group 0 draws a ``rate``
    share of the class-0 graphs and tops itself up to half the dataset with class-1 graphs, each
    side leaving the other group at least ``TOY_KEEP``; group 1 has the rest. ``rate`` 0.5 gives
    two alike groups, larger rates two ever more opposite ones."""
    if labels.max() > 1:
        raise GraphfedError("gpfl_toy partition: the toy split is for binary labels only")
    zeros, ones = np.flatnonzero(labels == 0), np.flatnonzero(labels == 1)
    from_zeros = min(int(rate * len(zeros)), len(zeros) - TOY_KEEP)
    from_ones = min(max(len(labels) // 2 - from_zeros, TOY_KEEP), len(ones) - TOY_KEEP)
    if from_zeros < 0 or from_ones < 0:
        raise GraphfedError(f"gpfl_toy partition: each class needs more than {TOY_KEEP} graphs")
    first = np.sort(np.concatenate([draws.choice(zeros, from_zeros, replace=False),
                                    draws.choice(ones, from_ones, replace=False)]))
    return [first, np.setdiff1d(np.arange(len(labels)), first)]


def gpfl_toy_split(labels: torch.Tensor, num_clients: int, rate: float, folds: int, fold: int,
                   seed: int) -> SplitPlan:
    """GPFL's Fig. 1 split: the two toy groups (``toy_groups``), each cut into ``num_clients / 2``
    stratified chunks (the code's ``subchunk_split``), group 0's clients first; inside every
    client the stratified ``fold`` is its test set, as in ``gpfl_split``. The same rules as the
    code, not its random draws (which its global NumPy state makes)."""
    if num_clients < 2 or num_clients % 2:
        raise GraphfedError(f"gpfl_toy partition: num_clients={num_clients} must be even (two "
                            "groups of equally many clients)")
    y = labels.cpu().numpy()
    draws = np.random.RandomState(seed)
    clients = []
    for group in toy_groups(y, rate, draws):
        _check_sizes(len(group), num_clients // 2, folds, "gpfl_toy")
        chunk = stratified_folds(y[group], num_clients // 2, seed)
        clients += [group[chunk == c] for c in range(num_clients // 2)]
    return _fold_plan(y, clients, folds, fold, seed)


def _check_sizes(total: int, clients: int, folds: int, name: str) -> None:
    """Refuse clients too small for a stratified ``folds``-fold split."""
    if total // clients < folds:
        raise GraphfedError(
            f"{name} partition: {total} graphs over {clients} clients leaves "
            f"{total // clients} per client, fewer than partition.folds={folds}; lower "
            "num_clients or partition.folds")


def _fold_plan(y: np.ndarray, clients: list[np.ndarray], folds: int, fold: int, seed: int
               ) -> SplitPlan:
    """Each client's stratified ``fold`` as its test set, the rest its training set."""
    splits = [torch.from_numpy(np.where(stratified_folds(y[ids], folds, seed) == fold,
                                        TEST, TRAIN)) for ids in clients]
    return SplitPlan(torch.empty(0, dtype=torch.long),
                     [torch.from_numpy(ids) for ids in clients], splits)
