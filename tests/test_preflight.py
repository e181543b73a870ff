"""Before a party joins a federation, a TLS handshake with the SuperLink names what is wrong: a
CA that does not vouch for the SuperLink's certificate, an address where nothing answers."""

from __future__ import annotations

import socket
import ssl
import threading

import pytest

from graphfed.errors import GraphfedError
from graphfed.flower.preflight import check_superlink

pytest.importorskip("cryptography")


@pytest.fixture
def tls_server(tmp_path):
    """A TLS listener on loopback with a SuperLink certificate from ``make_credentials``."""
    from graphfed.flower.deployment import make_credentials

    creds = make_credentials(tmp_path / "creds", 1)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(creds.server_cert, creds.server_key)
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
    yield f"127.0.0.1:{listener.getsockname()[1]}", creds
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
