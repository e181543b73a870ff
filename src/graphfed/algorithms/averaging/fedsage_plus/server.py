"""FedSage+'s server: FedAvg of the classifier, and FedAvg of NeighGen for ``gen_rounds``."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from graphfed.algorithms.averaging.fedavg import FedAvgServer
from graphfed.algorithms.averaging.fedsage_plus.impair import kept_nodes
from graphfed.algorithms.averaging.fedsage_plus.messages import (
    GEN,
    GEN_LOSS,
    MENDED,
    TRAIN_GEN,
    split_message,
)
from graphfed.algorithms.averaging.fedsage_plus.options import FedSagePlusOptions
from graphfed.errors import GraphfedError
from graphfed.mechanisms.updates import with_prefix
from graphfed.messages import (
    FLAG,
    LOSS,
    Message,
    MessageError,
    ScalarSpec,
    TensorSpec,
    fit_scalars,
    spec_of,
)
from graphfed.protocol import Setup


class FedSagePlusServer(FedAvgServer):
    """FedAvg of the classifier, plus FedAvg of NeighGen for ``gen_rounds`` rounds."""

    state_keys = (*FedAvgServer.state_keys, "gen", "gen_done", "mended")
    options: FedSagePlusOptions

    def __init__(self, setup: Setup) -> None:
        super().__init__(setup)
        self.gen: dict[str, Tensor] | None = None
        self.gen_done = 0  # generator aggregations so far
        self.mended: set[int] = set()
        self.training_gen: set[int] = set()  # clients asked to train the generator this round

    def configure_setup(self, clients: list[int]) -> dict[int, Message]:
        return {c: Message() for c in clients} if self.options.gen_rounds > 0 else {}

    def setup_reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        return None, {GEN_LOSS: LOSS}

    def check_setup_reply(self, client: int, message: Message) -> None:
        if not message.tensors or not all(k.startswith(GEN) for k in message.tensors):
            raise MessageError(f"client {client}: a setup reply holds NeighGen's parameters "
                               f"({GEN}*) only, got {sorted(message.tensors)}")

    def _gen_weight(self, client: int) -> float:
        """A client's NeighGen weight: its visible nodes after hiding (FedAvg by samples),
        from the partition's node count, not from the client."""
        sizes = self.setup.client_sizes
        if not sizes:
            raise GraphfedError("FedSage+'s server weighs generators by the partition's client "
                                "sizes (Setup.client_sizes), which this setup lacks")
        return float(kept_nodes(sizes[client].nodes, self.options.hide_portion))

    def _aggregate_gen(self, replies: dict[int, Message]) -> None:
        gens = {c: split_message(m)[1] for c, m in replies.items()}
        gens = {c: g for c, g in gens.items() if g}
        if not gens:
            return
        self.gen = self.average(list(gens.values()), [self._gen_weight(c) for c in gens],
                                self.gen)
        self.gen_done += 1

    def aggregate_setup(self, replies: dict[int, Message]) -> None:
        self._aggregate_gen(replies)

    def configure_fit(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        self.training_gen = set()
        if self.gen is None:
            return super().configure_fit(rnd, clients)
        train = self.gen_done < self.options.gen_rounds
        gen = with_prefix(self.gen, GEN)
        out = {}
        for c in clients:
            if c in self.mended:
                out[c] = Message(tensors=self.params)
                continue
            out[c] = Message(tensors={**self.params, **gen}, scalars={TRAIN_GEN: train})
            if train:
                self.training_gen.add(c)
        return out

    def configure_evaluate(self, rnd: int, clients: list[int]) -> dict[int, Message]:
        return {c: Message(tensors=self.params) for c in clients}

    def reply_spec(self, client: int) -> tuple[TensorSpec | None, ScalarSpec]:
        spec = spec_of(self.params)
        if client in self.training_gen and self.gen is not None:
            spec.update({GEN + k: (tuple(v.shape), v.dtype) for k, v in self.gen.items()})
        return spec, fit_scalars({MENDED: FLAG, GEN_LOSS: LOSS.optional})

    def aggregate_fit(self, rnd: int, replies: dict[int, Message]) -> None:
        self.mended |= {c for c, m in replies.items() if m.scalars.get(MENDED)}
        self._aggregate_gen(replies)
        classifier = {c: Message(tensors=split_message(m)[0], scalars=m.scalars)
                      for c, m in replies.items()}
        super().aggregate_fit(rnd, classifier)

    def round_metrics(self) -> dict[str, Any]:
        return {"fedsage+_generator_rounds": self.gen_done,
                "fedsage+_mended_clients": len(self.mended)}
