"""Check ``partition=gcfl_code`` against the procedure FGFL's code runs, agent by agent.

The code seeds NumPy's global legacy RNG, draws one ``randint(0, N, size=1)`` per graph left over
after the consecutive chunks, then cuts each agent with scikit-learn's ``train_test_split``
(80/20, then 50/50, ``random_state`` = the seed). This script runs that procedure with
scikit-learn itself and compares every agent's train, test and validation graphs with our replay,
for the graph counts of PROTEINS, IMDB-BINARY and DD. scikit-learn is not a graphfed dependency:

    pip install scikit-learn && python benchmarks/verify_gcfl_code_split.py
"""

from __future__ import annotations

import numpy as np
from sklearn.model_selection import train_test_split

from graphfed.data.partition.graph import gcfl_code_split
from graphfed.data.partition.plan import TEST, TRAIN

SIZES = {"PROTEINS": 1113, "IMDB-BINARY": 1000, "DD": 1178}


def reference_split(num_graphs: int, num_clients: int, seed: int
                    ) -> list[tuple[list[int], list[int], list[int]]]:
    """(train, validation, test) graph ids per agent, drawn the way the code draws them."""
    np.random.seed(seed)
    chunk = min(50, num_graphs // num_clients)
    agents = [list(range(j * chunk, (j + 1) * chunk)) for j in range(num_clients)]
    for graph_id in range(num_clients * chunk, num_graphs):
        agents[np.random.randint(low=0, high=num_clients, size=1)[0]].append(graph_id)
    out = []
    for ids in agents:
        train, held_out = train_test_split(ids, train_size=0.8, test_size=0.2, shuffle=True,
                                           random_state=seed)
        val, test = train_test_split(held_out, train_size=0.5, test_size=0.5, shuffle=True,
                                     random_state=seed)
        out.append((train, val, test))
    return out


def main() -> None:
    for dataset, num_graphs in SIZES.items():
        for seed in (123, 7):
            plan = gcfl_code_split(num_graphs, 10, seed)
            reference = reference_split(num_graphs, 10, seed)
            agents_equal = all(
                ids[splits == TRAIN].tolist() == train and ids[splits == TEST].tolist() == test
                for ids, splits, (train, _, test) in zip(plan.client_ids, plan.client_splits,
                                                          reference, strict=True))
            val_equal = plan.global_test.tolist() == sorted(v for _, val, _ in reference
                                                            for v in val)
            print(f"{dataset:12s} seed {seed:3d}: agents {'equal' if agents_equal else 'DIFFER'}, "
                  f"validation = global test {'equal' if val_equal else 'DIFFERS'}")


if __name__ == "__main__":
    main()
