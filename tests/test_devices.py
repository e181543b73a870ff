"""Where tensors live: the server on SERVER_DEVICE, each client on its trainer's device, and the
runtime moving every message onto the receiver's device at the boundary."""

import pytest
import torch
from torch import nn

from graphfed.algorithms.registry import load_all
from graphfed.checkpoints import load_checkpoint, save_checkpoint
from graphfed.config import OptimizerOptions, load_config
from graphfed.data.datasets import is_present
from graphfed.experiment import build_federation
from graphfed.messages import Message
from graphfed.protocol import SERVER_DEVICE, ClientContext
from graphfed.runtime.base import answer_on_client
from graphfed.tensors import move_tensors
from graphfed.training import Trainer
from tests.conftest import require

DATASET = {"node": "Cora", "graph": "PROTEINS"}
ALGORITHMS = load_all()


def test_a_message_arrives_on_the_clients_device_and_the_reply_on_the_servers():
    # the meta device stands in for an accelerator: tensors there have a device but no data
    trainer = Trainer(nn.Linear(3, 2, device="meta"), OptimizerOptions(), 2)
    ctx = ClientContext(0, None, {}, trainer)
    sent = Message({"w": torch.ones(3)}, {"n": 1})
    seen = {}
    produced = torch.zeros(2)

    def answer(message, ctx):
        seen["device"] = message.tensors["w"].device
        return Message({"update": produced}, {"num_samples": 4})

    reply = answer_on_client(answer, sent, ctx)
    assert seen["device"].type == "meta"
    assert sent.tensors["w"].device == SERVER_DEVICE  # the sender's copy stays where it was
    assert reply.tensors["update"].device == SERVER_DEVICE
    # the server gets a copy, never the client's storage
    assert reply.tensors["update"].data_ptr() != produced.data_ptr()
    assert reply.scalars == {"num_samples": 4}


def test_a_metrics_reply_passes_unchanged():
    trainer = Trainer(nn.Linear(3, 2), OptimizerOptions(), 2)
    metrics = {"test": {"acc": 0.5}}
    assert answer_on_client(lambda m, c: metrics, Message(), ClientContext(0, None, {}, trainer)) \
        is metrics


def test_move_tensors_moves_every_tensor_of_a_nested_state_and_keeps_the_rest():
    state = {"params": {"w": torch.ones(2)}, "history": [torch.zeros(1), 3],
             "pair": (torch.ones(1), "name"), "count": 4}
    moved = move_tensors(state, "meta")
    assert moved["params"]["w"].device.type == "meta"
    assert moved["history"][0].device.type == "meta" and moved["history"][1] == 3
    assert isinstance(moved["pair"], tuple) and moved["pair"][0].device.type == "meta"
    assert moved["pair"][1] == "name" and moved["count"] == 4
    assert state["params"]["w"].device == SERVER_DEVICE  # the original is left as it was


@require("Cora")
def test_the_server_holds_its_own_copy_of_the_initial_model():
    config = load_config(None, ["dataset=Cora", "num_clients=2", "partition=metis", "device=cpu"])
    fed = build_federation(config, 0)
    server_params = fed.runtime.server.setup.initial_params
    client_params = fed.runtime.client.setup.initial_params
    for name, value in server_params.items():
        assert value.device == SERVER_DEVICE
        assert torch.equal(value, client_params[name])
        assert value.data_ptr() != client_params[name].data_ptr()


def _two_rounds_and_a_resume_on(device: str, algorithm: str, checkpoint) -> None:
    """Every client answers two rounds of ``algorithm`` on ``device``; a fresh federation
    resumed from the checkpoint of round 2 answers round 3 and the evaluation; the server's
    global model stays on SERVER_DEVICE throughout."""
    level = ALGORITHMS[algorithm].levels[0]
    config = load_config(None, [f"dataset={DATASET[level]}", f"algorithm={algorithm}",
                                "num_clients=3", "rounds=3", f"device={device}",
                                *ALGORITHMS[algorithm].small_run])
    fed = build_federation(config, 0)
    fed.setup()
    for rnd in (1, 2):
        line = fed.fit_round(rnd)
        assert line["dropped"] == {}, line["dropped"]
    save_checkpoint(checkpoint, fed, 2, 0.0)
    resumed = build_federation(config, 0)
    assert load_checkpoint(checkpoint, resumed)[0] == 2
    assert resumed.fit_round(3)["dropped"] == {}
    assert len(resumed.evaluate(3)["clients"]) == 3
    params = resumed.runtime.server.global_params()
    assert params is None or all(v.device == SERVER_DEVICE for v in params.values())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_every_algorithm_runs_and_resumes_with_its_clients_on_cuda(algorithm, tmp_path):
    dataset = DATASET[ALGORITHMS[algorithm].levels[0]]
    if not is_present(dataset):
        pytest.skip(f"dataset {dataset} not present under GRAPHFED_DATA")
    _two_rounds_and_a_resume_on("cuda", algorithm, tmp_path / "checkpoint.pt")
