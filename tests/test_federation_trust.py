"""Who may run code in a federation graphfed sets up (issue 53): only the operator submits runs,
only graphfed's app runs, on the SuperLink's host and on every owner's SuperNode; and the
credentials that decide it are never replaced by accident."""

from __future__ import annotations

import asyncio
import http.client
import io
import socket
import ssl
import subprocess
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphfed.cli import app
from tests.conftest import error_line, require

pytest.importorskip("flwr", reason="Flower is not installed (pip install '.[flower]')")

FOREIGN_PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "stranger"
version = "1.0.0"
description = "Someone else's Flower app"
license = "MIT"

[tool.flwr.app]
publisher = "stranger"

[tool.flwr.app.components]
serverapp = "stranger_server:app"
clientapp = "stranger_client:app"
"""

# each side leaves a mark the moment any of its code runs (import), and once more when it works
STRANGER_SERVER = """import time
from pathlib import Path
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.serverapp import ServerApp

MARKS = Path({marks!r})
(MARKS / "server-imported").write_text("ran")
app = ServerApp()


@app.main()
def main(grid, context):
    deadline = time.monotonic() + 30
    while len(nodes := list(grid.get_node_ids())) < {nodes} and time.monotonic() < deadline:
        time.sleep(0.5)
    asks = [Message(RecordDict({{"ask": ConfigRecord({{"x": 1}})}}), node, "query")
            for node in nodes]
    replies = list(grid.send_and_receive(asks, timeout=30))
    (MARKS / "server-replies").write_text(" ".join(
        str(r.error.code) if r.has_error() else "answered" for r in replies))
"""
STRANGER_CLIENT = """from pathlib import Path
from flwr.app import Message, RecordDict
from flwr.clientapp import ClientApp

MARKS = Path({marks!r})
(MARKS / "client-imported").write_text("ran")
app = ClientApp()


@app.query()
def query(message, context):
    (MARKS / "client-answered").write_text("ran")
    return Message(RecordDict(), reply_to=message)
"""
INVALID_FAB = 7  # Flower's ErrorCode.INVALID_FAB: the error a SuperNode answers a refused app with


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def free_ports(count: int) -> list[int]:
    """Ports free right now on loopback (bound, then released)."""
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("127.0.0.1", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def stranger_app(tmp_path: Path, nodes: int) -> tuple[Path, Path]:
    """A self-made Flower app (its own server and client code) and the folder its marks go to."""
    marks, app_dir = tmp_path / "marks", tmp_path / "stranger"
    marks.mkdir()
    app_dir.mkdir()
    (app_dir / "pyproject.toml").write_text(FOREIGN_PYPROJECT)
    (app_dir / "stranger_server.py").write_text(STRANGER_SERVER.format(marks=str(marks),
                                                                      nodes=nodes))
    (app_dir / "stranger_client.py").write_text(STRANGER_CLIENT.format(marks=str(marks)))
    return app_dir, marks


def submit(fed, app_dir: Path, home: Path) -> subprocess.CompletedProcess:
    """``flwr run`` of ``app_dir`` by someone holding only the CA certificate and the address."""
    from graphfed.flower.deployment import CONNECTION, flower_home, tool

    return subprocess.run([tool("flwr"), "run", str(app_dir), CONNECTION, "--stream"],
                          env=flower_home(home, fed.address, fed.creds.ca),
                          capture_output=True, text=True, timeout=120)


@contextmanager
def loopback_federation(root: Path, superlink_command=None) -> Iterator:
    """Two owners on loopback, built by graphfed's own recipe (``LoopbackFederation``: what
    ``graphfed federation superlink/register/node`` run), optionally with another SuperLink
    command; every process ends with the block. Flower's app cache goes under ``root``."""
    import graphfed.flower.loopback as loopback
    from graphfed.config import load_config

    port, node_port = free_ports(2)
    config = load_config(None, ["dataset=Cora", "num_clients=2", "partition=louvain",
                                "device=cpu"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FLWR_HOME", str(root / "flwr-home"))
        if superlink_command is not None:
            patch.setattr(loopback, "superlink_command", superlink_command)
        with loopback.LoopbackFederation(config, root / "federation", port, node_port,
                                         start_timeout=60) as fed:
            yield fed


@pytest.fixture(scope="module")
def federation(tmp_path_factory):
    """graphfed's federation, as ``graphfed federation`` sets it up."""
    from graphfed.data.datasets import is_present

    if not is_present("Cora"):
        pytest.skip("dataset Cora not present under GRAPHFED_DATA")
    with loopback_federation(tmp_path_factory.mktemp("guarded")) as fed:
        yield fed


@require("Cora")
def test_a_stranger_holding_the_ca_cannot_run_an_app_anywhere(federation, tmp_path):
    """The finding: a self-made app submitted with `flwr run` to graphfed's federation ran its
    server code on the SuperLink's host and its client code on an owner's machine."""
    fed = federation
    app_dir, marks = stranger_app(tmp_path, nodes=2)
    done = submit(fed, app_dir, tmp_path / "stranger-home")
    assert done.returncode != 0, done.stdout
    assert sorted(p.name for p in marks.iterdir()) == []  # none of its code ran, anywhere
    assert ("this SuperLink runs only graphfed's app; refused: it carries files of its own "
            "(stranger_client.py, stranger_server.py)") in fed.log_path("superlink").read_text()


@require("Cora")
def test_supernodes_refuse_a_foreign_app_even_from_a_superlink_that_sends_it(tmp_path):
    """A SuperLink that does not check apps (Flower's own flower-superlink with the operator's
    certificate: a compromised SuperLink host) runs the stranger's server code, but every owner's
    SuperNode refuses the app: none of its client code runs, and the server is told why."""
    from graphfed.flower.deployment import superlink_flags, tool

    def unchecked(creds, host: str = "127.0.0.1", port: int = 9093) -> list[str]:
        return [tool("flower-superlink"), *superlink_flags(creds, host, port)]

    app_dir, marks = stranger_app(tmp_path, nodes=2)
    with loopback_federation(tmp_path, unchecked) as fed:
        done = submit(fed, app_dir, tmp_path / "stranger-home")
        logs = [fed.log_path(node).read_text() for node in ("node0", "node1")]
    assert done.returncode == 0, done.stderr
    assert (marks / "server-imported").exists()  # the unchecked SuperLink ran it and asked both
    assert (marks / "server-replies").read_text().split() == [str(INVALID_FAB)] * 2
    assert not (marks / "client-imported").exists() and not (marks / "client-answered").exists()
    for log in logs:
        assert "graphfed: refused an app that is not graphfed's" in log
        assert "it carries files of its own (stranger_client.py, stranger_server.py)" in log


def _own_non_loopback_address() -> str | None:
    """An address of this host that is not loopback (no packet is sent), or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))
        except OSError:
            return None
        address = probe.getsockname()[0]
    return None if address.startswith("127.") else address


@require("Cora")
def test_the_control_api_answers_only_on_the_superlinks_host(federation):
    """A request from another address than loopback or the one it arrived on is refused before
    Flower sees it; the SuperNodes' Fleet API stays open."""
    source = _own_non_loopback_address()
    if source is None:
        pytest.skip("this machine has no non-loopback address to call from")
    fed = federation
    context = ssl.create_default_context(cafile=str(fed.creds.ca))
    host, port = fed.address.split(":")

    def post(path: str, bind: str | None) -> tuple[int, str]:
        connection = http.client.HTTPSConnection(host, int(port), context=context, timeout=20,
                                                 source_address=(bind, 0) if bind else None)
        try:
            connection.request("POST", path, body=b"",
                               headers={"content-type": "application/protobuf"})
            response = connection.getresponse()
            return response.status, response.read().decode(errors="replace")
        finally:
            connection.close()

    for path in ("/v1/control/start-run", "/v1/control/register-node", "/v1/runtime/get-nodes",
                 "/v1/fleet/../control/list-runs"):
        status, body = post(path, source)
        assert status == 403 and "answer only on its own host" in body, (path, status, body)
    assert post("/v1/control/list-runs", None)[0] != 403  # the operator, on the host
    assert post("/v1/fleet/get-run", source)[0] != 403  # a SuperNode from elsewhere


def _bundle(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as bundle:
        for name, content in files.items():
            bundle.writestr(name, content)
    return buffer.getvalue()


def test_only_graphfeds_own_app_bundle_passes(tmp_path):
    """graphfed's app as `flwr run` bundles it passes; a bundle that brings any file of its own
    (even one shadowing graphfed's client), other components or dependencies does not."""
    from flwr.cli.build import build_fab_from_disk

    from graphfed.flower.deployment import APP_PYPROJECT
    from graphfed.flower.guard import app_refusal

    (tmp_path / "pyproject.toml").write_text(APP_PYPROJECT)
    ours = build_fab_from_disk(tmp_path)
    assert app_refusal(ours) is None
    with zipfile.ZipFile(io.BytesIO(ours)) as bundle:
        files = {name: bundle.read(name) for name in bundle.namelist()}
    shadow = {**files, "graphfed/flower/client_app.py": b"import os"}
    assert "carries files of its own (graphfed/flower/client_app.py)" in app_refusal(
        _bundle(shadow))
    for change in (('clientapp = "graphfed.flower.client_app:app"', 'clientapp = "x:app"'),
                   ('license = "MIT"', 'license = "MIT"\ndependencies = ["evil"]')):
        other = APP_PYPROJECT.replace(*change).encode()
        assert "pyproject.toml is not graphfed's" in app_refusal(
            _bundle({"pyproject.toml": other}))
    for odd in (b"tool = 1", b"[tool]\nflwr = 3", b""):  # refused, never an error
        assert "pyproject.toml is not graphfed's" in app_refusal(_bundle({"pyproject.toml": odd}))
    assert "not a readable Flower app bundle" in app_refusal(b"not a zip")
    assert "has no pyproject.toml" in app_refusal(_bundle({".info/CONTENT": b""}))


def _call(scope: dict) -> int:
    """The status ``OwnHostOnly`` answers ``scope`` with; 200 when it lets the request through."""
    from graphfed.flower.guard import OwnHostOnly

    sent: list[dict] = []

    async def downstream(scope, receive, send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def receive() -> dict:
        return {"type": "http.request", "body": b""}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(OwnHostOnly(downstream)({"type": "http", **scope}, receive, send))
    return sent[0]["status"]


@pytest.mark.parametrize("client, server, path, status", [
    ("203.0.113.9", "10.0.0.5", "/v1/control/start-run", 403),
    ("203.0.113.9", "10.0.0.5", "/v1/control/register-node", 403),
    ("203.0.113.9", "10.0.0.5", "/v1/runtime/acquire-task", 403),
    ("203.0.113.9", "10.0.0.5", "/docs", 403),
    ("203.0.113.9", "10.0.0.5", "/v1/fleet/./../control/start-run", 403),
    ("203.0.113.9", "10.0.0.5", "/v1/fleet/pull-messages", 200),
    ("203.0.113.9", "10.0.0.5", "/health", 200),
    ("127.0.0.1", "127.0.0.1", "/v1/control/start-run", 200),
    ("::1", "::1", "/v1/control/start-run", 200),
    ("::ffff:127.0.0.1", "::", "/v1/control/start-run", 200),
    ("10.0.0.5", "10.0.0.5", "/v1/control/start-run", 200),  # this host, by its own address
    ("10.0.0.6", "10.0.0.5", "/v1/control/start-run", 403),
])
def test_control_and_runtime_apis_need_the_superlinks_own_host(client, server, path, status):
    assert _call({"client": (client, 50000), "server": (server, 9093), "path": path}) == status


def test_credentials_are_never_replaced_without_force(tmp_path):
    out = tmp_path / "creds"
    assert invoke("federation", "credentials", str(out), "--owners", "2").exit_code == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    line = error_line(invoke("federation", "credentials", str(out), "--owners", "2"))
    assert "already holds credentials" in line and "--force" in line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    result = invoke("federation", "credentials", str(out), "--owners", "1", "--force")
    assert result.exit_code == 0, result.output
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(after) == ["ca.crt", "owner-0.key", "owner-0.pub", "superlink.crt",
                             "superlink.key"]  # owner 1's old key does not linger
    assert all(after[name] != before[name] for name in after)


@pytest.mark.parametrize("owners", ["0", "-3"])
def test_a_federation_without_owners_is_refused(tmp_path, owners):
    line = error_line(invoke("federation", "credentials", str(tmp_path / "creds"),
                             "--owners", owners))
    assert f"--owners {owners}: a federation needs at least one data owner" in line
    assert not (tmp_path / "creds").exists()
