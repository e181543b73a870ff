"""Checks a party runs before it joins a federation, so a mistake reads as what it is.

Flower reports a node started with the wrong CA certificate, an expired certificate, an
unreachable address and an unregistered key alike ("could not establish a connection",
"Connection to the SuperLink is unavailable"). A TLS handshake with the SuperLink, made here with
the party's own CA file, tells these apart before Flower starts; when it succeeds and the
SuperLink still refuses to activate the node, the node's key is not registered. Certificates are
also checked for their validity period, on the files a party holds and on the one the SuperLink
presents.
"""

from __future__ import annotations

import datetime
import socket
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from graphfed.errors import GraphfedError

if TYPE_CHECKING:
    from cryptography.x509 import Certificate

# OpenSSL's verification results for a certificate outside its validity period
CERT_NOT_YET_VALID, CERT_HAS_EXPIRED = 9, 10
RENEW = ("the operator makes new credentials (graphfed federation credentials DIR --force), "
         "restarts the SuperLink and hands each owner its new key and ca.crt")

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
    if ca is not None:
        check_certificate(ca, "CA certificate")
    context = None if ca is None else _client_context(ca)
    try:
        with socket.create_connection((host, int(port)), timeout) as sock:
            if context is not None:
                with context.wrap_socket(sock, server_hostname=host):
                    pass
    except ssl.SSLCertVerificationError as e:
        presented = f"the certificate the SuperLink at {address} presents"
        if e.verify_code in (CERT_NOT_YET_VALID, CERT_HAS_EXPIRED):
            raise GraphfedError(_period(_presented(host, int(port), timeout), presented)
                                or f"{presented} is outside its validity period: {RENEW}"
                                ) from None
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


def check_certificate(path: Path, what: str, now: datetime.datetime | None = None) -> None:
    """Raise a ``GraphfedError`` unless ``path`` is a PEM certificate valid ``now``: an expired
    or not-yet-valid one is named with its dates, before any process uses it."""
    from cryptography import x509

    if not Path(path).is_file():
        raise GraphfedError(f"no {what} at {path} (graphfed federation credentials makes it)")
    try:
        cert = x509.load_pem_x509_certificate(Path(path).read_bytes())
    except ValueError:
        raise GraphfedError(f"{path} is not a PEM {what}") from None
    problem = _period(cert, f"the {what} {path}", now)
    if problem:
        raise GraphfedError(problem)


def _period(cert: Certificate | None, what: str, now: datetime.datetime | None = None) -> str:
    """What is wrong with ``cert``'s validity period at ``now``, or '' when nothing is (or
    there is no certificate to look at)."""
    if cert is None:
        return ""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    if now > end:
        return f"{what} expired on {end:%Y-%m-%d %H:%M} UTC: {RENEW}"
    if now < start:
        return (f"{what} is not valid until {start:%Y-%m-%d %H:%M} UTC (it is now "
                f"{now:%Y-%m-%d %H:%M} UTC here): check this machine's clock, or wait")
    return ""


def _presented(host: str, port: int, timeout: float) -> Certificate | None:
    """The certificate the server at ``host:port`` presents, read without verifying it (only
    to name its dates), or None."""
    from cryptography import x509

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    try:
        with (socket.create_connection((host, port), timeout) as sock,
              context.wrap_socket(sock, server_hostname=host) as tls):
            der = tls.getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der) if der else None
    except (OSError, ValueError):
        return None


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
