"""GCFL+ (Xie et al., NeurIPS 2021): GCFL whose clusters split by the DTW distances between the
members' sequences of update norms over the last ``seq_length`` rounds (the conv-update norm,
the ``dWs`` variant of GCFL's code); see ``gcfl`` for the shared protocol.

GPFL's "GCFL" baseline is this method as the GPFL authors' code runs it
(Jiachen2cc/Graph-Personalized-Federated-Learning): mode GCFL calls ``run_gcflplus_dWs``
(main.py:355-356; training.py:608-664), with eps1 / eps2 per data group (``gcfl_param``,
data_utils.py:62-70, set by ``gcfl_args``, main.py:400-406), sequence length 10 (main.py:145-146),
DTW on unstandardised sequences (main.py:130-131), no split before round 21 (``c_round > 20``,
training.py:637, a condition of every split, not only the first) and every parameter shared.
``gpfl_code_overrides`` gives those settings as config overrides."""

from __future__ import annotations

import numpy as np
import torch
from pydantic import Field

from graphfed.algorithms.clustered.gcfl import (
    GCFLClient,
    GCFLOptions,
    GCFLServer,
    check_scope,
)
from graphfed.algorithms.registry import ANY_TASK, AT_NODE_LEVEL, Algorithm, register
from graphfed.mechanisms.clustering import dtw_distance, min_cut
from graphfed.protocol import Setup

# eps1 / eps2 of the GPFL code per dataset (data_utils.py:62-70)
GPFL_CODE_EPS: dict[str, tuple[float, float]] = {
    "NCI1": (0.1, 0.21), "PROTEINS": (0.03, 0.06), "Yeast": (0.1, 0.2)}
GPFL_CODE_SEQ_LENGTH = 10
GPFL_CODE_WARMUP = 20


def gpfl_code_overrides(dataset: str) -> list[str]:
    """Config overrides that run ``gcfl+`` as the GPFL code runs its GCFL on ``dataset``
    (``KeyError`` for a dataset GPFL does not use)."""
    eps1, eps2 = GPFL_CODE_EPS[dataset]
    return [f"gcfl+.eps1={eps1}", f"gcfl+.eps2={eps2}",
            f"gcfl+.seq_length={GPFL_CODE_SEQ_LENGTH}", f"gcfl+.warmup={GPFL_CODE_WARMUP}",
            "gcfl+.standardize=false", "gcfl+.shared_params=all"]


class GCFLPlusOptions(GCFLOptions):
    seq_length: int = Field(5, ge=2, description="update-norm sequence length for DTW")
    standardize: bool = Field(False, description="divide each sequence by its std before DTW")


class GCFLPlusServer(GCFLServer):
    options: GCFLPlusOptions
    state_keys = (*GCFLServer.state_keys, "sequences")

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.sequences: dict[int, list[float]] = {c: [] for c in range(setup.num_clients)}

    def record(self, updates: dict[int, torch.Tensor]) -> None:
        for c, u in updates.items():
            self.sequences[c].append(float(u.double().norm()))

    def ready_to_split(self, rnd: int, members: list[int]) -> bool:
        return all(len(s) >= self.options.seq_length for s in self.sequences.values())

    def split_cluster(self, rnd: int, members: list[int],
                      updates: dict[int, torch.Tensor]) -> tuple[list[int], list[int]]:
        """GCFL+: cut max(D) - D for the DTW distances D of the update-norm sequences."""
        o = self.options
        seqs = [np.array(self.sequences[c][-o.seq_length:]) for c in members]
        if o.standardize:
            seqs = [s / max(s.std(), 1e-12) for s in seqs]
        d = np.array([[dtw_distance(a, b) for b in seqs] for a in seqs])
        self.sequences = {c: [] for c in self.sequences}
        return min_cut(d.max() - d, members)


GCFL_PLUS = register(Algorithm(
    "gcfl+", GCFLPlusServer, GCFLClient, GCFLPlusOptions,
    family="clustered",
    tasks=ANY_TASK,
    paper="Xie et al., NeurIPS 2021 (GCFL+)",
    levels=("graph", "node", "edge"),
    check=check_scope,
    sparse_features=True,
    modes={"node": AT_NODE_LEVEL},
    description="GCFL with DTW on update-norm sequences"))
