"""``reproduce --ray``: seeds as tasks on a real local Ray cluster (a head and a worker node
started with ``ray start`` here), giving the table ``--jobs 1`` gives; an address nobody
answers is one line."""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from graphfed.errors import GraphfedError
from graphfed.reproduce.runner import reproduce
from tests.conftest import require

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install '.[flower]')")

RAY = str(Path(sys.executable).with_name("ray"))
QUICK = {"methods": ["self-train"], "seeds": 2, "progress": False,
         "overrides": ("rounds=2", "eval_every=2")}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(*args: str) -> subprocess.Popen:
    """A ``ray start --block`` node of its own session: ending it ends the node's processes,
    and no other Ray on this machine (a Flower simulation in another test) is touched."""
    return subprocess.Popen([RAY, "start", "--block", "--num-cpus=1", "--disable-usage-stats",
                             *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)


def test_an_address_nobody_answers_is_one_line_before_any_planning(tmp_path):
    """First in the module: the cluster fixture below leaves this process connected."""
    with pytest.raises(GraphfedError, match=r"--ray 127\.0\.0\.1:\d+: no Ray cluster answered"):
        reproduce("fgfl-ablation", out=tmp_path, ray_address=f"127.0.0.1:{free_port()}",
                  **QUICK)
    assert not tmp_path.joinpath("runs").exists()


@pytest.fixture(scope="module")
def cluster() -> Iterator[str]:
    """A head and a worker node on this machine, one CPU each; their address."""
    port = free_port()
    address = f"127.0.0.1:{port}"
    temp = tempfile.mkdtemp(prefix="/tmp/gfray")  # short: Ray's socket paths have a limit
    nodes = [start("--head", f"--port={port}", "--include-dashboard=false",
                   f"--temp-dir={temp}")]
    try:
        deadline = time.monotonic() + 120
        while True:  # the worker joins once the head answers
            try:
                socket.create_connection(("127.0.0.1", port), 1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("the Ray head did not start within 120 s")
                time.sleep(1)
        nodes.append(start(f"--address={address}"))
        ray.init(address=address, log_to_driver=False)
        while len([n for n in ray.nodes() if n["Alive"]]) < 2:
            if time.monotonic() > deadline:
                pytest.fail("the Ray worker node did not join within 120 s")
            time.sleep(1)
        yield address
    finally:
        ray.shutdown()
        for node in nodes:
            node.terminate()
        for node in nodes:
            try:
                node.wait(60)
            except subprocess.TimeoutExpired:
                node.kill()


@require("PROTEINS")
def test_seeds_on_a_two_node_cluster_give_the_table_of_one_process(cluster, tmp_path):
    _, on_ray, _ = reproduce("fgfl-ablation", out=tmp_path / "ray", ray_address=cluster, **QUICK)
    _, alone, _ = reproduce("fgfl-ablation", out=tmp_path / "one", jobs=1, **QUICK)
    assert on_ray == alone and on_ray and all(r["n_seeds"] == 2 for r in on_ray)
    runs = tmp_path / "ray" / "runs"
    assert (runs / "self-train-PROTEINS" / "seed-1" / "summary.json").is_file()
    assert list((runs / ".seeds").iterdir()) == []  # every seed adopted into its cell
    # run again: every seed is finished, nothing is sent to the cluster
    before = (runs / "self-train-PROTEINS" / "seed-0" / "summary.json").stat().st_mtime_ns
    reproduce("fgfl-ablation", out=tmp_path / "ray", ray_address=cluster, **QUICK)
    after = (runs / "self-train-PROTEINS" / "seed-0" / "summary.json").stat().st_mtime_ns
    assert after == before


@require("Cora")
def test_a_sweep_on_the_cluster_gives_the_sweep_of_one_process(cluster, tmp_path):
    pytest.importorskip("optuna", reason="Optuna is not installed (pip install '.[sweep]')")
    from tests.test_sweep import sweep, table, trials

    on_ray, alone = tmp_path / "ray", tmp_path / "one"
    for out, options in ((on_ray, ("--ray", cluster)), (alone, ())):
        result = sweep(out, *options, methods="fedprox", budget=2, seeds=1)
        assert result.exit_code == 0, result.output
    assert table(on_ray) == table(alone) and trials(on_ray) == trials(alone)
