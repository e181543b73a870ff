"""The leave-one-out contribution diagnostic (FGFL's Fig. 1; spec ``fgfl.md`` §4).

Agent i's contribution in round t is (acc_all − acc_−i) / acc_−i: the accuracy on the
server's global test set of the round's aggregate with every agent's update, against the same
aggregation rerun without agent i's. The server computes it, since only it knows how it
aggregates; it scores the models on its own copy of the network and of the global test set (on
``SERVER_DEVICE``), and under a forked random state, so a run with the diagnostic trains
exactly as one without. It costs N + 1 global evaluations a round, so it is off by default.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
from pydantic import Field

from graphfed.data.federated import ClientData, FederatedData
from graphfed.errors import GraphfedError
from graphfed.protocol import SERVER_DEVICE, AlgorithmOptions, Setup
from graphfed.tensors import Params
from graphfed.training import PreparedClient, Trainer

RECORD = "leave_one_out"  # the server record's key in metrics.jsonl


class LeaveOneOutOptions(AlgorithmOptions):
    leave_one_out: bool = Field(
        False, description="diagnostic: each round, every agent's contribution (acc_all − "
        "acc_−i) / acc_−i on the global test set, the aggregate rerun without agent i "
        "(FGFL's Fig. 1); costs N + 1 global evaluations a round and changes no training")


GlobalTest = Callable[[], PreparedClient]  # prepares the global test set when first asked


def server_inputs(data: FederatedData, on_server: Callable[[ClientData], PreparedClient]
                  ) -> dict[str, Any]:
    """The global test set the diagnostic scores aggregates on, prepared on the server's
    device only by a server that runs it (None where the partition keeps none)."""
    held = data.global_test
    return {"global_test": None if held is None else lambda: on_server(held)}


class ContributionProbe:
    """Scores a server's aggregates on the global test set: its own evaluation-only copy of the
    run's network on ``SERVER_DEVICE``, beside the clients' trainer."""

    def __init__(self, setup: Setup, global_test: GlobalTest):
        if setup.network is None:
            raise GraphfedError("leave_one_out scores aggregates with the run's network; build "
                                "the server with build_server")
        network = copy.deepcopy(setup.network).to(SERVER_DEVICE)
        self.trainer = Trainer(network, setup.optimizer, setup.num_classes)
        self.global_test = global_test()

    @classmethod
    def of(cls, setup: Setup, global_test: GlobalTest | None) -> ContributionProbe | None:
        """The probe where the server's options ask for the diagnostic (None otherwise),
        refusing a run whose server never sees each agent's update or has no global test."""
        options = setup.options
        if not (isinstance(options, LeaveOneOutOptions) and options.leave_one_out):
            return None
        if setup.dp is not None or setup.secure_aggregation is not None:
            raise GraphfedError("leave_one_out reruns the aggregation without each agent: it "
                                "needs each agent's plain update (no dp, no secure_aggregation)")
        if global_test is None:
            raise GraphfedError("leave_one_out scores aggregates on the global test set: set "
                                "partition.global_test > 0")
        return cls(setup, global_test)

    def accuracy(self, params: Params) -> float:
        """``params`` on the global test set, the caller's random state left as it was."""
        with torch.random.fork_rng(devices=[]):
            on_device = {k: v.to(SERVER_DEVICE) for k, v in params.items()}
            return float(self.trainer.evaluate(on_device, self.global_test, ("test",))
                         ["test"]["acc"])

    def leave_out(self, clients: list[int], aggregate_without: Callable[[list[int]], Params]
                  ) -> list[float]:
        """The accuracy of ``aggregate_without(rest)`` for each client left out in turn."""
        return [self.accuracy(aggregate_without([c for c in clients if c != left]))
                for left in clients]

    def record(self, clients: list[int], without: list[float], aggregate: Params
               ) -> dict[str, Any]:
        """The round's server record: both accuracies and each client's contribution (NaN
        where the aggregate without it scores 0)."""
        full = self.accuracy(aggregate)
        return {"clients": clients, "acc_all": full, "acc_without": without,
                "contribution": [(full - w) / w if w > 0 else float("nan") for w in without]}
