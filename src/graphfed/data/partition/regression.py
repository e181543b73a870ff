"""Partitions of real-valued targets and molecules: target-quantile bins, which let a label-skew
partition (Dirichlet) skew a continuous target, and scaffold clients, the realistic
cross-company split of a molecular dataset.

Scaffold clients (``scaffold_plan``). Every molecule's Bemis–Murcko scaffold (rdkit's
``MurckoScaffoldSmiles``: the ring systems and the linkers between them, side chains removed;
an acyclic molecule's scaffold is the empty string) names its group. The groups, largest first
(ties: the group whose first molecule comes first in the dataset), go one at a time to the
client holding the fewest molecules so far (ties: the lowest client number), so no scaffold is
in two clients and the client sizes stay close. Inside each client its groups, again largest
first, fill the training split up to the train share of its molecules, then the validation
split up to the train + validation share, the rest the test split (DeepChem's scaffold-split
rule), so a client's three splits share no scaffold; its largest group always trains, so no
client is left without training molecules. The plan is deterministic: the seed does not move
it.
"""

from __future__ import annotations

import numpy as np
import torch

from graphfed.data.datasets import require_rdkit
from graphfed.data.partition.plan import TEST, TRAIN, VAL, SplitPlan
from graphfed.errors import GraphfedError


def quantile_bins(targets: torch.Tensor, bins: int) -> torch.Tensor:
    """Each target's quantile bin, 0 .. ``bins`` − 1: the label a label-skew partition deals
    by (bin b holds the targets between the b/bins and (b+1)/bins quantiles)."""
    values = targets.double().numpy()
    edges = np.quantile(values, np.arange(1, bins) / bins)
    return torch.as_tensor(np.searchsorted(edges, values, side="right"), dtype=torch.long)


def murcko_scaffold(smiles: str) -> str:
    """The Bemis–Murcko scaffold of one molecule, as canonical SMILES."""
    from rdkit.Chem.Scaffolds.MurckoScaffold import MurckoScaffoldSmiles

    return str(MurckoScaffoldSmiles(smiles=smiles, includeChirality=False))


def scaffold_groups(smiles: list[str]) -> list[list[int]]:
    """The molecules' indices grouped by scaffold, largest group first (ties: by first index)."""
    require_rdkit("partition=scaffold")
    groups: dict[str, list[int]] = {}
    for index, molecule in enumerate(smiles):
        groups.setdefault(murcko_scaffold(molecule), []).append(index)
    return sorted(groups.values(), key=lambda group: (-len(group), group[0]))


def scaffold_plan(smiles: list[str], num_clients: int,
                  ratios: tuple[float, float, float]) -> SplitPlan:
    """Scaffold clients with scaffold-disjoint train/val/test splits inside each (see the
    module's docstring); no global test set."""
    groups = scaffold_groups(smiles)
    if len(groups) < num_clients:
        raise GraphfedError(f"partition=scaffold: the dataset has {len(groups)} scaffolds, "
                            f"fewer than the {num_clients} clients")
    members: list[list[list[int]]] = [[] for _ in range(num_clients)]
    sizes = [0] * num_clients
    for group in groups:
        client = min(range(num_clients), key=lambda k: (sizes[k], k))
        members[client].append(group)
        sizes[client] += len(group)
    client_ids, client_splits = [], []
    for own, size in zip(members, sizes, strict=True):
        ids, codes = _scaffold_split(own, size, ratios)
        client_ids.append(ids)
        client_splits.append(codes)
    return SplitPlan(torch.zeros(0, dtype=torch.long), client_ids, client_splits)


def _scaffold_split(groups: list[list[int]], size: int, ratios: tuple[float, float, float]
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """One client's ids (ascending) and their split codes: its groups, largest first, into
    train while they fit the train share (the first always), then val, then test."""
    train_cut, val_cut = ratios[0] * size, (ratios[0] + ratios[1]) * size
    code_of: dict[int, int] = {}
    train = placed = 0
    for group in groups:
        if train == 0 or train + len(group) <= train_cut:
            code, train = TRAIN, train + len(group)
        elif placed + len(group) <= val_cut:
            code = VAL
        else:
            code = TEST
        placed += len(group)
        code_of.update(dict.fromkeys(group, code))
    ids = sorted(code_of)
    return (torch.tensor(ids, dtype=torch.long),
            torch.tensor([code_of[i] for i in ids], dtype=torch.int8))
