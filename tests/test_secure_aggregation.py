"""SecAgg+ (issue 50, item 1): the refusals, and graphfed's Flower path run on a Grid whose nodes
are graphfed's own ClientApp (Flower's SecAgg+ mod included) called in this process, every
message and reply through Flower's protobuf serde: the same numbers as in-process, a server that
never holds a client's update, and a round that survives a client lost after the key exchange.
Secure sums (FedGCN's setup exchange, FedProto's prototypes): the sums the plain runs
aggregate, within quantisation error, the same numbers on both runtimes, and no client's
summand at the server. Ray-backed Flower is ``tests/test_flower.py``'s SecAgg+ case."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from uuid import uuid4

import numpy as np
import pytest

from graphfed.config import load_config
from graphfed.launch import run as run_experiment
from tests.conftest import refused_run, require

pytest.importorskip("flwr", reason="Flower is not installed (pip install '.[flower]')")

SMALL = ["dataset=Cora", "algorithm=fedavg", "partition=louvain", "num_clients=3", "rounds=2",
         "local_epochs=2", "device=cpu", "checkpoint_every=0", "engine=sequential",
         "secure_aggregation.enabled=true"]
FIRST_NODE = 100  # node ids differ from client ids, as on a real federation


@pytest.mark.parametrize(("overrides", "says"), [
    (["secure_aggregation.threshold=11"], "exceeds the 10 clients a round samples"),
    (["aggregation.rule=median"], "aggregation.rule=median needs each client's update"),
    (["algorithm=scaffold"], "ScaffoldServer.aggregate_fit"),
    (["algorithm=ditto"], "its server uses each client's reply"),
    (["dp.noise_multiplier=1.0"], "dp.where=server clips each client's update"),
    (["secure_aggregation.quantization_bits=0"], "quantization_bits"),
    (["secure_aggregation.quantization_bits=-2"], "quantization_bits"),
    (["secure_aggregation.quantization_bits=30"], "overflows the modulus"),
    (["secure_aggregation.shares=4"], "must be odd"),
    (["client_fraction=0.1"], "at least 2 clients a round"),
    (["algorithm=fedtgp"], "trains its global prototypes on each client's own"),
    (["algorithm=fedgcn", "fedgcn.dedup_overlaps=true"], "needs each client's own edges"),
    (["algorithm=fedgnn"], "each client's own setup reply (FedGnnServer.configure_setup)"),
    (["algorithm=fedgcn", "client_fraction=0.3", "secure_aggregation.threshold=3",
      "secure_aggregation.shares=3", "secure_aggregation.quantization_bits=29"],
     "10 clients * 2**quantization_bits"),
])
def test_bad_settings_exit_2_with_one_line(tmp_path, overrides, says):
    line = refused_run(tmp_path, "secure_aggregation.enabled=true", *overrides)
    assert "secure_aggregation" in line and says in line


def test_secure_aggregation_admits_the_averaging_family_and_local_dp():
    for extra in (["algorithm=fedprox"], ["algorithm=moon"], ["algorithm=fedgcn"],
                  ["algorithm=fedproto"], ["algorithm=fedproto", "fedproto.weighted=false"],
                  ["dp.noise_multiplier=0.5", "dp.where=client"]):
        assert load_config(None, [*SMALL, *extra]).secure_aggregation.enabled


class LocalGrid:
    """A Flower ``Grid`` whose nodes are graphfed's ClientApp in this process. ``lose``: the
    client whose node fails (``"error"``) or goes silent (``"silent"``) from the stage that
    collects the masked vectors on; ``seen``: every reply the server pulled."""

    def __init__(self, num_nodes: int, lose: tuple[int, str] | None = None):
        from flwr.app import Context, RecordDict

        self.contexts = {FIRST_NODE + i: Context(1, FIRST_NODE + i, {"partition-id": i},
                                                 RecordDict(), {})
                         for i in range(num_nodes)}
        self.lose = lose
        self.lost = False
        self.waiting: dict[str, object] = {}
        self.seen: list = []

    def get_node_ids(self) -> list[int]:
        return list(self.contexts)

    def push_messages(self, messages) -> list[str]:
        from flwr.app import Error
        from flwr.app import Message as FlowerMessage
        from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS
        from flwr.common.serde import message_from_proto, message_to_proto

        from graphfed.flower.client_app import app

        ids = []
        for message in messages:
            proto = message_to_proto(message)
            proto.metadata.message_id = uuid4().hex
            delivered = message_from_proto(proto)
            node = delivered.metadata.dst_node_id
            configs = delivered.content.config_records.get(RECORD_KEY_CONFIGS)
            if (self.lose is not None and node == FIRST_NODE + self.lose[0]
                    and configs is not None and configs["stage"] == "collect_masked_vectors"):
                self.lost = True
            ids.append(proto.metadata.message_id)
            if self.lost and node == FIRST_NODE + self.lose[0]:
                if self.lose[1] == "silent":
                    continue
                reply = FlowerMessage(Error(1, "node lost"), reply_to=delivered)
            else:
                reply = app(delivered, self.contexts[node])
            self.waiting[proto.metadata.message_id] = message_from_proto(message_to_proto(reply))
        return ids

    def pull_messages(self, ids):
        out = [self.waiting.pop(i) for i in ids if i in self.waiting]
        self.seen.extend(out)
        return out

    def send_and_receive(self, messages, timeout=None):
        return self.pull_messages(self.push_messages(messages))


def on_local_grid(config, run_dir: Path, grid: LocalGrid, monkeypatch) -> dict:
    """graphfed's Flower ServerApp body over ``grid``."""
    from flwr.supercore.task_identity import TaskIdentity

    from graphfed.flower.server_app import serve

    for name, value in (("_run_id", 1), ("_node_id", 0), ("_task_id", 0)):
        monkeypatch.setattr(TaskIdentity, name, value)
    run_dir.mkdir(parents=True)
    return serve(grid, config, run_dir, progress=False)


def recorded(monkeypatch, module, name: str) -> list:
    """Every value ``module.name`` returns from now on (it still returns it)."""
    out: list = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a: out.append(real(*a)) or out[-1])
    return out


def lines(run_dir: Path) -> list[dict]:
    text = (run_dir / "seed-0" / "metrics.jsonl").read_text()
    return [json.loads(x) for x in text.splitlines()]


@require("Cora")
def test_flower_path_gives_the_in_process_numbers_and_the_server_only_masked_vectors(
        tmp_path, monkeypatch):
    """Same seed, same rounds, losses, accuracies and byte counts in-process and over Flower's
    stages; everything the server pulled holds no client's update or quantised vector in the
    clear: no arrays, no update's bytes, masked vectors that agree with no quantised one."""
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS

    from graphfed.runtime import secagg

    mod_module = importlib.import_module("flwr.client.mod.secure_aggregation.secaggplus_mod")
    local, _ = run_experiment(load_config(None, SMALL), tmp_path / "local", progress=False)
    config = load_config(None, [*SMALL, "runtime=flower-sim"])
    updates = recorded(monkeypatch, secagg, "update_arrays")
    quantised = recorded(monkeypatch, mod_module, "quantize")
    grid = LocalGrid(3)
    on_local_grid(config, tmp_path / "flower", grid, monkeypatch)

    for x, y in zip(lines(local), lines(tmp_path / "flower"), strict=True):
        for key in ("round", "sampled", "answered", "dropped", "bytes_up", "bytes_down"):
            assert x[key] == y[key], key
        for key in ("train_loss", "test_acc", "test_loss", "val_acc"):
            assert x[key] == pytest.approx(y[key], abs=1e-9), (x["round"], key)
    assert len(updates) == len(quantised) == 6  # 3 clients, 2 rounds

    pulled = [m.content for m in grid.seen if m.metadata.message_type == "train"]
    assert all(len(a.data) == 0 for c in pulled for r in c.array_records.values()
               for a in r.values())
    blobs = b"".join(_bytes(c) for c in pulled)
    for update in updates:
        big = max(update, key=np.size)
        assert big.size > 16
        assert big.reshape(-1)[:16].tobytes() not in blobs
        assert big.reshape(-1)[:16].astype(np.float32).tobytes() not in blobs
    masked = [[secagg.bytes_to_ndarray(b) for b in c.config_records[RECORD_KEY_CONFIGS][
        "masked_params"]] for c in pulled if "masked_params" in c.config_records.get(
            RECORD_KEY_CONFIGS, {})]
    assert len(masked) == 6
    for vector in masked:
        flat = np.concatenate([a.reshape(-1) for a in vector[1:-1]])
        for plain in quantised:
            clear = np.concatenate([a.reshape(-1) for a in plain[:-1]])
            assert np.mean(flat == clear) < 0.01


def _bytes(content) -> bytes:
    """Every byte string and number a reply carried, concatenated."""
    out = []
    for record in content.config_records.values():
        for value in record.values():
            for item in value if isinstance(value, list) else [value]:
                out.append(item if isinstance(item, bytes) else str(item).encode())
    return b"".join(out)


@require("Cora")
@pytest.mark.parametrize("how", ["error", "silent"])
def test_a_client_lost_after_the_key_exchange_still_completes_the_round(tmp_path,
                                                                        monkeypatch, how):
    """Client 2's node fails (or falls silent) once the keys are shared: the survivors' shares
    of its first private key remove the pairwise masks it agreed, and the round reveals
    exactly the weighted mean of clients 0 and 1's training losses."""
    from graphfed.build import client_sizes, federated_data
    from graphfed.runtime import secagg

    config = load_config(None, [*SMALL, "rounds=1", "runtime=flower-sim",
                                "flower.round_timeout=1"])
    updates = recorded(monkeypatch, secagg, "update_arrays")
    on_local_grid(config, tmp_path / "flower", LocalGrid(3, lose=(2, how)), monkeypatch)
    (line,) = lines(tmp_path / "flower")
    assert line["answered"] == [0, 1] and "masked vectors" in line["dropped"]["2"]
    sizes = [s.train for s in client_sizes(federated_data(config, 0))][:2]
    losses = [float(u[-1][0]) for u in updates]
    assert len(losses) == 2
    assert line["train_loss"] == pytest.approx(np.average(losses, weights=sizes), abs=1e-4)
    assert line["test_acc"] > 0.3


def _capture(monkeypatch, cls, method: str, keep) -> list:
    """Wrap ``cls.method`` so that after each call ``keep(self)`` is appended to the list."""
    seen: list = []
    real = getattr(cls, method)

    def wrapped(self, *args):
        real(self, *args)
        seen.append(keep(self))

    monkeypatch.setattr(cls, method, wrapped)
    return seen


@require("Cora")
def test_fedgcn_secure_setup_reveals_the_plain_sums_within_quantisation(tmp_path, monkeypatch):
    """The per-node totals FedGCN's server hands out under secure aggregation are the plain
    run's, each entry within one quantisation step per client; the counts exactly."""
    from graphfed.algorithms.averaging.fedgcn import FedGCNServer

    config = [*SMALL[:-1], "algorithm=fedgcn", "rounds=1"]
    plain = _capture(monkeypatch, FedGCNServer, "aggregate_setup", lambda s: dict(s.totals))
    run_experiment(load_config(None, config), tmp_path / "plain", progress=False)
    secure = _capture(monkeypatch, FedGCNServer, "aggregate_setup_sum",
                      lambda s: (dict(s.totals), s.bound))
    run_experiment(load_config(None, [*config, "secure_aggregation.enabled=true"]),
                   tmp_path / "secure", progress=False)
    expected, ((got, bound),) = plain[0], secure  # the secure run's public part holds none
    step = 2 * bound / 2 ** 22
    assert sorted(got) == sorted(expected) == [0, 1, 2]
    for c, (sums, counts) in expected.items():
        assert (got[c][1] == counts).all()
        assert (got[c][0] - sums).abs().max() <= 3 * step
        assert sums.abs().max() > 1  # the sums exceed the default clipping range's scale


@require("Cora")
@pytest.mark.parametrize("weighted", ["true", "false"])
def test_fedproto_secure_sums_give_the_plain_global_prototypes(tmp_path, monkeypatch, weighted):
    """Round 1's global prototypes from the secure sums equal Eq. 6 over the plain replies (the
    same clients trained from the same seeds), within quantisation error; the same classes
    get one."""
    from graphfed.algorithms.personalized.fedproto import FedProtoServer

    config = [*SMALL[:-1], "algorithm=fedproto", "rounds=1", f"fedproto.weighted={weighted}"]
    def keep(server):
        return server.prototypes.clone(), server.known.clone()

    plain = _capture(monkeypatch, FedProtoServer, "aggregate_fit", keep)
    run_experiment(load_config(None, config), tmp_path / "plain", progress=False)
    secure = _capture(monkeypatch, FedProtoServer, "aggregate_fit_sum", keep)
    run_experiment(load_config(None, [*config, "secure_aggregation.enabled=true"]),
                   tmp_path / "secure", progress=False)
    ((expected, known),), ((got, got_known),) = plain, secure
    assert (got_known == known).all() and known.sum() > 1
    assert (got - expected).abs().max() < 1e-4
    assert expected.abs().max() > 1e-2


@require("Cora")
@pytest.mark.parametrize("algorithm", ["fedgcn", "fedproto"])
def test_secure_sums_on_flower_give_the_in_process_numbers_and_no_summand(
        tmp_path, monkeypatch, algorithm):
    """FedGCN's summed setup exchange and FedProto's summed fit replies over Flower's stages
    give the in-process numbers; what the server pulled holds no client's summand in the
    clear: the setup's public replies carry only node ids, no float arrays come back, and
    the masked vectors agree with no quantised summand."""
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS

    from graphfed.runtime import records, secagg

    config = [*SMALL, f"algorithm={algorithm}"]
    local, _ = run_experiment(load_config(None, config), tmp_path / "local", progress=False)
    mod_module = importlib.import_module("flwr.client.mod.secure_aggregation.secaggplus_mod")
    summands = recorded(monkeypatch, secagg, "summand_arrays")
    quantised = recorded(monkeypatch, mod_module, "quantize")
    grid = LocalGrid(3)
    on_local_grid(load_config(None, [*config, "runtime=flower-sim"]), tmp_path / "flower",
                  grid, monkeypatch)

    for x, y in zip(lines(local), lines(tmp_path / "flower"), strict=True):
        for key in ("round", "sampled", "answered", "dropped", "bytes_up", "bytes_down"):
            assert x[key] == y[key], key
        for key in ("train_loss", "test_acc", "test_loss", "val_acc"):
            if x.get(key) is None:  # the setup exchange's line
                assert y.get(key) is None, key
            else:
                assert x[key] == pytest.approx(y[key], abs=1e-9), (x["round"], key)
    assert len(summands) == 3 * (1 if algorithm == "fedgcn" else 2)

    public = [m.content for m in grid.seen if m.metadata.message_type == "train.setup"]
    assert len(public) == (3 if algorithm == "fedgcn" else 0)
    assert all(set(c.array_records[records.TENSORS]) == {"ids"} for c in public)
    pulled = [m.content for m in grid.seen if m.metadata.message_type == "train"]
    assert all(len(a.data) == 0 for c in pulled for r in c.array_records.values()
               for a in r.values())
    blobs = b"".join(_bytes(c) for c in pulled)
    masked = [[secagg.bytes_to_ndarray(b) for b in c.config_records[RECORD_KEY_CONFIGS][
        "masked_params"]] for c in pulled if "masked_params" in c.config_records.get(
            RECORD_KEY_CONFIGS, {})]
    masked = [v for v in masked if v[1].shape == summands[0][0].shape]  # not FedGCN's fit
    assert len(masked) == len(summands)
    for summand in summands:
        flat = summand[0].reshape(-1)
        values = flat[flat != 0][:16]
        assert values.size == 16
        assert values.tobytes() not in blobs and values.astype(np.float32).tobytes() not in blobs
    summed = [q for q in quantised if q[0].shape == summands[0][0].shape]
    assert len(summed) == len(summands)
    for vector in masked:
        for plain in summed:
            assert np.mean(vector[1] == plain[0]) < 0.01
