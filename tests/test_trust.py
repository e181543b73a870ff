"""The server believes no number a client could lie about: sizes come from the partition,
identities from the owners' keys, and every reply (decoded or not) is checked at the boundary
on every runtime; a reply that fails is dropped and logged, and the run goes on."""

from __future__ import annotations

import pytest
import torch

from graphfed.config import load_config
from graphfed.experiment import build_federation
from graphfed.messages import NUM_SAMPLES, Message, MessageError
from tests.conftest import require

# the sequential engine: a lying client overrides Client.fit, which it calls
BASE = ["dataset=Cora", "algorithm=fedavg", "partition=louvain", "num_clients=3", "rounds=2",
        "eval_every=1", "device=cpu", "checkpoint_every=0", "engine=sequential"]


def lying(client_cls, liar: int, claim: float):
    """``client_cls`` whose client ``liar`` claims ``claim`` training samples."""

    class Liar(client_cls):
        def fit(self, message, ctx):
            reply = super().fit(message, ctx)
            if ctx.client_id == liar:
                reply.scalars[NUM_SAMPLES] = claim
            return reply

    return Liar


@require("Cora")
@pytest.mark.parametrize("claim", [1e300, 0, 10**9])
def test_a_client_lying_about_its_size_changes_nothing_in_the_aggregate(claim, caplog):
    honest = build_federation(load_config(None, BASE), 0)
    liar = build_federation(load_config(None, BASE), 0)
    client = liar.runtime.client
    liar.runtime.client = lying(type(client), 1, claim)(client.setup)
    honest.fit_round(1)
    liar.fit_round(1)
    ours, theirs = honest.runtime.server.params, liar.runtime.server.params
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert f"client 1 claimed {claim!r} training samples" in caplog.text


@require("Cora")
def test_the_server_weighs_by_the_partition_even_when_a_negative_size_is_claimed():
    fed = build_federation(load_config(None, BASE), 0)
    client = fed.runtime.client
    fed.runtime.client = lying(type(client), 0, -1e9)(client.setup)
    record = fed.fit_round(1)  # a negative weight used to crash the weighted average
    assert record["answered"] == [0, 1, 2]
    sizes = [s.train for s in fed.runtime.server.setup.client_sizes]
    assert sizes == [c.num_samples("train") for c in fed.data.clients] and all(sizes)


# ---------------------------------------------------------------- malformed setup replies

@require("Cora")
def test_a_fedgcn_setup_reply_of_the_wrong_length_is_dropped_at_the_boundary(caplog):
    fed = build_federation(load_config(None, [*BASE, "algorithm=fedgcn"]), 0)
    client = fed.runtime.client
    answer = type(client).answer_setup

    def short(self, message, ctx):
        reply = answer(self, message, ctx)
        if ctx.client_id == 2:
            reply.tensors = {k: v[:-1] for k, v in reply.tensors.items()}
        return reply

    fed.runtime.client.answer_setup = short.__get__(client)
    line = fed.setup()
    assert line["answered"] == [0, 1] and "'ids'" in line["dropped"][2]
    assert set(fed.runtime.server.totals) == {0, 1}
    fed.fit_round(1)  # the run goes on; client 2 trains on its local features


def test_fgfl_refuses_inconsistent_vocabularies_client_by_client():
    from graphfed.algorithms.fgfl.server import FGFLServer

    server = FGFLServer.__new__(FGFLServer)
    server.setup = type("S", (), {"options": type("O", (), {"use_prototypes": True})()})()
    keys = torch.tensor([[0, 3, 1, 1, 1, -1], [1, 2, 0, 1, -1, -1]])
    good = Message({"motif_keys": keys, "motif_counts": torch.tensor([4, 2]),
                    "prototypes": torch.zeros(2, 8)})
    server.check_setup_reply(0, good)
    bad = {
        "disagree": {**good.tensors, "prototypes": torch.zeros(3, 8)},
        "out of range": {**good.tensors, "motif_counts": torch.tensor([4, -2])},
        "repeats": {**good.tensors, "motif_keys": torch.stack([keys[0], keys[0]])},
        "length": {**good.tensors, "motif_keys": torch.tensor([[0, 9, 1, 1, 1, -1],
                                                               [1, 2, 0, 1, -1, -1]])},
    }
    for why, tensors in bad.items():
        with pytest.raises(MessageError, match="client 3"):
            server.check_setup_reply(3, Message(tensors))
        assert why


# ---------------------------------------------------------------- the Flower codec

def test_a_record_that_does_not_decode_is_a_message_error_not_a_crash():
    pytest.importorskip("flwr")
    from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

    from graphfed.runtime import records

    def content(array: Array | None = None, scalars: dict | None = None) -> RecordDict:
        arrays = ArrayRecord(array_dict={} if array is None else {"w": array})
        return RecordDict({records.TENSORS: arrays,
                           records.SCALARS: ConfigRecord(scalars or {})})

    cases = {
        "dtype 'load'": Array(dtype="load", shape=(1,), stype=records.STYPE, data=b"\0" * 4),
        "bytes": Array(dtype="float32", shape=(3,), stype=records.STYPE, data=b"\0" * 4),
        "shape": Array(dtype="float32", shape=(-1,), stype=records.STYPE, data=b"\0" * 4),
    }
    for why, array in cases.items():
        with pytest.raises(MessageError):
            records.decode(content(array))
        assert why
    with pytest.raises(MessageError, match="not numbers"):
        records.decode(content(scalars={"num_samples": "many"}))
    with pytest.raises(MessageError, match="lacks"):
        records.decode(RecordDict())
    with pytest.raises(MessageError, match="metric record"):
        records.decode_metrics(RecordDict())
