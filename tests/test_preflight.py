"""Before a party joins a federation, a TLS handshake with the SuperLink names what is wrong: a
CA that does not vouch for the SuperLink's certificate, a certificate outside its validity
period, an address where nothing answers."""

from __future__ import annotations

import datetime
import importlib
import re
import socket
import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from graphfed.cli import app
from graphfed.errors import GraphfedError
from graphfed.flower.preflight import check_superlink
from tests.conftest import error_line

pytest.importorskip("cryptography")

NOW = datetime.datetime.now(datetime.timezone.utc)
DAY = datetime.timedelta(days=1)
DATE = r"\d{4}-\d\d-\d\d \d\d:\d\d UTC"


@pytest.fixture
def tls_server(tmp_path):
    """A TLS listener on loopback with a SuperLink certificate from ``make_credentials``."""
    from graphfed.flower.deployment import make_credentials

    creds = make_credentials(tmp_path / "creds", 1)
    with serving(creds.server_cert, creds.server_key) as address:
        yield address, creds


@contextmanager
def serving(cert: Path, key: Path) -> Iterator[str]:
    """A TLS listener on loopback presenting ``cert``; its address."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            try:
                with context.wrap_socket(conn, server_side=True):
                    pass
            except (ssl.SSLError, OSError):
                pass  # the client gave up on our certificate

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        listener.close()


def test_the_right_ca_passes_and_a_wrong_one_is_named(tls_server, tmp_path):
    from graphfed.flower.deployment import make_credentials

    address, creds = tls_server
    check_superlink(address, creds.ca)
    other = make_credentials(tmp_path / "other", 1)
    with pytest.raises(GraphfedError, match=rf"certificate that {other.ca} does not vouch for "
                                            r"\(.*\): use the CA certificate the operator made"):
        check_superlink(address, other.ca)
    with pytest.raises(GraphfedError, match="no CA certificate at"):
        check_superlink(address, tmp_path / "missing.crt")
    (tmp_path / "junk.crt").write_text("not a certificate")
    with pytest.raises(GraphfedError, match="is not a PEM CA certificate"):
        check_superlink(address, tmp_path / "junk.crt")


def test_an_address_where_nothing_answers_is_named():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # free once closed
    with pytest.raises(GraphfedError, match=rf"nothing answers at 127.0.0.1:{port} .*is the "
                                            r"SuperLink running"):
        check_superlink(f"127.0.0.1:{port}", None)
    with pytest.raises(GraphfedError, match="is not host:port"):
        check_superlink("localhost", None)


def _leaf(tmp_path: Path, start: datetime.datetime, end: datetime.datetime
          ) -> tuple[Path, Path, Path]:
    """A CA valid now and a certificate for 127.0.0.1 it signed, valid from ``start`` to
    ``end`` (an operator who renewed the CA but not the SuperLink's certificate, or a clock
    that is off): the CA's path, the certificate's and its key's."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def make(name: str, key, signer, issuer: str, since, until, ca: bool) -> x509.Certificate:
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(since).not_valid_after(until)
                   .add_extension(x509.BasicConstraints(ca=ca, path_length=None), True))
        if not ca:
            builder = builder.add_extension(x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        return builder.sign(signer, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1())
    ca = make("test CA", ca_key, ca_key, "test CA", NOW - 100 * DAY, NOW + 100 * DAY, True)
    leaf = make("127.0.0.1", key, ca_key, "test CA", start, end, False)
    pem = serialization.Encoding.PEM
    paths = tmp_path / "ca.crt", tmp_path / "leaf.crt", tmp_path / "leaf.key"
    paths[0].write_bytes(ca.public_bytes(pem))
    paths[1].write_bytes(leaf.public_bytes(pem))
    paths[2].write_bytes(key.private_bytes(pem, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


@pytest.mark.parametrize("start, end, message", [
    (NOW - 40 * DAY, NOW - 10 * DAY, rf"presents expired on {DATE}: the operator makes new "
                                     r"credentials \(graphfed federation credentials DIR "
                                     r"--force\)"),
    (NOW + 10 * DAY, NOW + 40 * DAY, rf"presents is not valid until {DATE} \(it is now {DATE} "
                                     r"here\): check this machine's clock"),
])
def test_a_superlink_certificate_outside_its_period_is_named(tmp_path, start, end, message):
    ca, cert, key = _leaf(tmp_path, start, end)
    with serving(cert, key) as address, pytest.raises(
            GraphfedError, match=rf"the certificate the SuperLink at {address} " + message):
        check_superlink(address, ca)


@pytest.mark.parametrize("start, days, message", [
    (NOW - 60 * DAY, 30, rf"expired on {DATE}: the operator makes new credentials"),
    (NOW + 2 * DAY, 30, rf"is not valid until {DATE} \(it is now {DATE} here\)"),
])
def test_every_command_using_stale_credentials_names_their_dates(tmp_path, monkeypatch, start,
                                                                 days, message):
    """Before: `register` said "Connection to the SuperLink is unavailable" and the SuperLink
    started with a certificate no node would accept."""
    from graphfed.flower.deployment import make_credentials

    def never(*args) -> None:
        raise AssertionError("a SuperLink was started on stale credentials")

    monkeypatch.setattr(importlib.import_module("graphfed.cli.federation").os, "execvpe", never)
    creds = make_credentials(tmp_path / "creds", 1, not_before=start, days=days)
    expected = rf"the CA certificate {re.escape(str(creds.ca))} {message}"
    with serving(creds.server_cert, creds.server_key) as address:
        with pytest.raises(GraphfedError, match=expected):  # node, run with runtime=flower
            check_superlink(address, creds.ca)
        for args in (["superlink", "--credentials", str(creds.root)],  # also what loopback runs
                     ["register", str(creds.owner_public_key(0)), "--superlink", address,
                      "--ca", str(creds.ca)]):
            line = error_line(CliRunner().invoke(app, ["federation", *args]))
            assert re.search(expected, line), line
