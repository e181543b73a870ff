"""Check ``partition=gpfl_dirichlet`` against the procedure GPFL's code runs, client by client.

The code (``dataprocess/data_split.py:label_skew_balance``, ``dataprocess/utils.py``) seeds
NumPy's global legacy RNG, draws all clients' Dirichlet priors in one call, caps them at 0.95, then
fills equal-size clients graph by graph; each client is cut by scikit-learn's
``StratifiedKFold(5, shuffle=True, random_state=seed)``. This script runs that procedure with
the global RNG and scikit-learn itself, and compares every client's graphs (in order) and every
fold's test graphs with our replay, on the real PROTEINS and NCI1 labels. scikit-learn is not a
graphfed dependency:

    pip install scikit-learn && GRAPHFED_DATA=... python benchmarks/verify_gpfl_split.py
"""

from __future__ import annotations

import warnings

import numpy as np
import torch
from sklearn.model_selection import StratifiedKFold

from graphfed.data import load_dataset
from graphfed.data.partition.gpfl import gpfl_split
from graphfed.data.partition.plan import TEST


def reference_clients(labels: np.ndarray, num_clients: int, alpha: float,
                      seed: int) -> list[np.ndarray]:
    """Each client's graph ids, in the order the code stores them, drawn the code's way."""
    np.random.seed(seed)
    num_classes = labels.max() + 1
    priors = np.random.dirichlet([alpha] * num_classes, size=num_clients)
    for row in priors:
        over = row > 0.95
        spare = (row - 0.95).clip(min=0).sum() / (row <= 0.95).sum()
        row[over] = 0.95
        row[row < 0.95] += spare
    steps = priors.cumsum(axis=1)
    pools = [list(np.where(labels == c)[0]) for c in range(num_classes)]
    need = [len(labels) // num_clients + (i < len(labels) % num_clients)
            for i in range(num_clients)]
    clients = [[0] * n for n in need]
    while sum(need):
        i = np.random.randint(num_clients)
        if need[i] == 0:
            continue
        need[i] -= 1
        c = np.argmax(np.random.uniform() <= steps[i])
        while not pools[c]:
            c = np.argmax(np.random.uniform() <= steps[i])
        clients[i][need[i]] = pools[c].pop()
    return [np.array(c) for c in clients]


def main() -> None:
    # scikit-learn warns for every client with a class smaller than the fold count; the code
    # runs through it, and so does our replay
    warnings.simplefilter("ignore", UserWarning)
    for dataset in ("PROTEINS", "NCI1"):
        labels = torch.cat([g.y for g in load_dataset(dataset).graphs])
        for num_clients, alpha, seed in ((25, 0.5, 0), (15, 5.0, 3), (20, 1.0, 42)):
            reference = reference_clients(labels.numpy(), num_clients, alpha, seed)
            clients_equal = folds_equal = True
            for fold in range(5):
                plan = gpfl_split(labels, num_clients, alpha, 5, fold, seed)
                for ids, splits, ref in zip(plan.client_ids, plan.client_splits, reference,
                                            strict=True):
                    clients_equal &= ids.tolist() == ref.tolist()
                    kfold = StratifiedKFold(n_splits=5, shuffle=True, random_state=seed)
                    _, test = list(kfold.split(ref, labels.numpy()[ref]))[fold]
                    folds_equal &= torch.nonzero(splits == TEST).view(-1).tolist() == list(test)
            print(f"{dataset:9s} k={num_clients} alpha={alpha} seed={seed}: clients "
                  f"{'equal' if clients_equal else 'DIFFER'}, test folds "
                  f"{'equal' if folds_equal else 'DIFFER'}")


if __name__ == "__main__":
    main()
