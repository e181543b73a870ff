"""Checks a party runs before it joins a federation, so a mistake reads as what it is.

Flower reports a node started with the wrong CA certificate, an unreachable address and an
unregistered key alike ("could not establish a connection", "please check your network
connection"). A TLS handshake with the SuperLink, made here with the party's own CA file, tells
these apart before Flower starts; when it succeeds and the SuperLink still refuses to activate the
node, the node's key is not registered.
"""

from __future__ import annotations

import socket
import ssl
from pathlib import Path

from graphfed.errors import GraphfedError

# how flower-supernode reports the SuperLink refusing to activate it (Flower's API error
# FLEET_NODE_ACTIVATION_FAILED: no registered node has its public key)
ACTIVATION_REFUSED = "[code: 2004]"


def check_superlink(address: str, ca: Path | None, timeout: float = 10.0) -> None:
    """Raise a ``GraphfedError`` that names the cause unless ``address`` answers and, with
    ``ca``, presents a TLS certificate for its host signed by ``ca``."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise GraphfedError(f"SuperLink address {address!r} is not host:port")
    context = None if ca is None else _client_context(ca)
    try:
        with socket.create_connection((host, int(port)), timeout) as sock:
            if context is not None:
                with context.wrap_socket(sock, server_hostname=host):
                    pass
    except ssl.SSLCertVerificationError as e:
        raise GraphfedError(
            f"the SuperLink at {address} presents a certificate that {ca} does not vouch for "
            f"({e.verify_message}): use the CA certificate the operator made with the "
            f"SuperLink's own (ca.crt from graphfed federation credentials, made with --host "
            f"{host})") from None
    except ssl.SSLError as e:
        raise GraphfedError(f"the TLS handshake with the SuperLink at {address} failed "
                            f"({e.reason or e}): is TLS on there?") from None
    except OSError as e:
        raise GraphfedError(f"nothing answers at {address} ({e.strerror or e}): is the "
                            f"SuperLink running, and is the address right?") from None


def _client_context(ca: Path) -> ssl.SSLContext:
    if not Path(ca).is_file():
        raise GraphfedError(f"no CA certificate at {ca}")
    try:
        context = ssl.create_default_context(cafile=str(ca))
    except ssl.SSLError:
        raise GraphfedError(f"{ca} is not a PEM CA certificate") from None
    context.set_alpn_protocols(["h2"])  # what gRPC speaks
    return context


def refused_key(superlink: str, key: Path) -> str:
    """What a node that reached the SuperLink over TLS but could not join is told."""
    public = Path(key).with_suffix(".pub")
    return (f"the SuperLink at {superlink} did not admit this SuperNode although TLS to it works: "
            f"its key {key} is not registered there; ask the operator to run `graphfed "
            f"federation register {public.name} --superlink {superlink} --ca ca.crt`")
