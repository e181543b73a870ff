"""GCFL+ (Xie et al., NeurIPS 2021): GCFL whose clusters split by the DTW distances between the
members' sequences of update norms over the last ``seq_length`` rounds (the conv-update norm,
the ``dWs`` variant of GCFL's code); see ``gcfl`` for the shared protocol."""

from __future__ import annotations

import numpy as np
from pydantic import Field

from graphfed.algorithms.clustered.gcfl import GCFLClient, GCFLOptions, GCFLServer
from graphfed.algorithms.registry import Algorithm, register
from graphfed.mechanisms.clustering import dtw_distance, min_cut


class GCFLPlusOptions(GCFLOptions):
    seq_length: int = Field(5, ge=2, description="update-norm sequence length for DTW")
    standardize: bool = Field(False, description="divide each sequence by its std before DTW")


class GCFLPlusServer(GCFLServer):
    state_keys = (*GCFLServer.state_keys, "sequences")

    def __init__(self, setup):
        super().__init__(setup)
        self.sequences: dict[int, list[float]] = {c: [] for c in range(setup.num_clients)}

    def record(self, updates):
        for c, u in updates.items():
            self.sequences[c].append(float(u.double().norm()))

    def ready_to_split(self, rnd, members):
        return all(len(s) >= self.setup.options.seq_length for s in self.sequences.values())

    def split_cluster(self, rnd, members, updates):
        """GCFL+: cut max(D) - D for the DTW distances D of the update-norm sequences."""
        o = self.setup.options
        seqs = [np.array(self.sequences[c][-o.seq_length:]) for c in members]
        if o.standardize:
            seqs = [s / max(s.std(), 1e-12) for s in seqs]
        d = np.array([[dtw_distance(a, b) for b in seqs] for a in seqs])
        self.sequences = {c: [] for c in self.sequences}
        return min_cut(d.max() - d, members)


GCFL_PLUS = register(Algorithm(
    "gcfl+", GCFLPlusServer, GCFLClient, GCFLPlusOptions,
    family="clustered",
    paper="Xie et al., NeurIPS 2021 (GCFL+)",
    levels=("graph",),
    description="GCFL with DTW on update-norm sequences"))
