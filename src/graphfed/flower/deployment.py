"""``runtime=flower``: a real federation — a SuperLink, one SuperNode per data owner, TLS and
SuperNode authentication. This module makes the credentials, the Flower commands each party runs,
and submits a graphfed experiment as a Flower app (it needs flwr only when it runs them).

Credentials are made where they are used and never committed: a CA and the SuperLink's TLS
certificate for the operator, one ECDSA key pair per owner (the owner keeps the private key; the
operator registers the public key with the SuperLink, which then refuses any other node).
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from graphfed.errors import GraphfedError
from graphfed.serialization import write_private

CONNECTION = "graphfed"
APP_PYPROJECT = """[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "graphfed-run"
version = "1.0.0"
description = "A graphfed experiment as a Flower app"
license = "MIT"

[tool.flwr.app]
publisher = "graphfed"

[tool.flwr.app.components]
serverapp = "graphfed.flower.server_app:app"
clientapp = "graphfed.flower.client_app:app"

[tool.flwr.app.config]
config = ""
run-dir = ""
owner-keys = ""
"""


@dataclass(frozen=True)
class Credentials:
    """Paths inside a credentials directory made by ``make_credentials``."""

    root: Path

    @property
    def ca(self) -> Path:
        return self.root / "ca.crt"

    @property
    def server_cert(self) -> Path:
        return self.root / "superlink.crt"

    @property
    def server_key(self) -> Path:
        return self.root / "superlink.key"

    def owner_key(self, client: int) -> Path:
        return self.root / f"owner-{client}.key"

    def owner_public_key(self, client: int) -> Path:
        return self.root / f"owner-{client}.pub"

    def existing(self) -> list[Path]:
        """The credential files already in ``root`` (any owner's, whatever the count)."""
        if not self.root.is_dir():
            return []
        fixed = [p for p in (self.ca, self.server_cert, self.server_key) if p.exists()]
        return fixed + sorted([*self.root.glob("owner-*.key"), *self.root.glob("owner-*.pub")])


def make_credentials(root: Path, owners: int, hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
                     days: int = 30, force: bool = False,
                     not_before: datetime.datetime | None = None) -> Credentials:
    """A CA, the SuperLink's TLS certificate for ``hosts`` and ``owners`` node key pairs, valid
    for ``days`` from ``not_before`` (default: now). Credentials already in ``root`` are kept
    unless ``force``: replacing them silently would lock out every owner holding a key."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    if owners < 1:
        raise GraphfedError(f"--owners {owners}: a federation needs at least one data owner")
    creds = Credentials(root)
    existing = creds.existing()
    if existing and not force:
        shown = ", ".join(p.name for p in existing[:4]) + (", ..." if len(existing) > 4 else "")
        raise GraphfedError(f"{root} already holds credentials ({shown}); new ones would "
                            "replace the CA, the SuperLink key and every owner's key: pass "
                            "--force to replace them, or choose another directory")
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    for stale in existing:  # with force: no owner key of the old set stays beside the new one
        stale.unlink()
    start = not_before or datetime.datetime.now(datetime.timezone.utc)

    def cert(subject: str, key, issuer: str, signer, extensions) -> x509.Certificate:
        builder = (x509.CertificateBuilder()
                   .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
                   .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(start - datetime.timedelta(minutes=5))
                   .not_valid_after(start + datetime.timedelta(days=days)))
        for extension, critical in extensions:
            builder = builder.add_extension(extension, critical=critical)
        return builder.sign(signer, hashes.SHA256())

    pem = serialization.Encoding.PEM
    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca = cert("graphfed CA", ca_key, "graphfed CA", ca_key,
              [(x509.BasicConstraints(ca=True, path_length=None), True)])
    server_key = ec.generate_private_key(ec.SECP384R1())
    names = [x509.IPAddress(ipaddress.ip_address(h)) if _is_ip(h) else x509.DNSName(h)
             for h in hosts]
    server = cert(hosts[0], server_key, "graphfed CA", ca_key,
                  [(x509.SubjectAlternativeName(names), False),
                   (x509.BasicConstraints(ca=False, path_length=None), True)])
    creds.ca.write_bytes(ca.public_bytes(pem))
    creds.server_cert.write_bytes(server.public_bytes(pem))
    write_private(creds.server_key, server_key.private_bytes(
        pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()))
    for client in range(owners):
        key = ec.generate_private_key(ec.SECP384R1())
        write_private(creds.owner_key(client), key.private_bytes(
            pem, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()))
        creds.owner_public_key(client).write_bytes(key.public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH))
    return creds


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def tool(name: str) -> str:
    """A Flower executable installed beside this interpreter (so a virtual environment need not
    be activated), else the bare name for PATH."""
    path = Path(sys.executable).parent / name
    return str(path) if path.exists() else name


def tool_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the interpreter's directory first on PATH: the
    SuperLink starts further Flower executables by name."""
    env = dict(os.environ if env is None else env)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    return env


def guarded(role: str) -> list[str]:
    """Flower's ``flower-<role>`` started through ``graphfed.flower.guard``: only the operator
    submits runs (Control API on the SuperLink's own host) and only graphfed's app runs."""
    return [sys.executable, "-m", "graphfed.flower.guard", role]


def superlink_flags(creds: Credentials, host: str = "127.0.0.1", port: int = 9093) -> list[str]:
    """``flower-superlink``'s flags: TLS on, only registered SuperNodes admitted, no app
    dependencies installed at run time (an app's dependencies would be code it brings)."""
    return ["--ssl-ca-certfile", str(creds.ca), "--ssl-certfile", str(creds.server_cert),
            "--ssl-keyfile", str(creds.server_key), "--enable-supernode-auth",
            "--disable-runtime-dependency-installation", "--host", host, "--port", str(port)]


def superlink_command(creds: Credentials, host: str = "127.0.0.1", port: int = 9093) -> list[str]:
    """The operator's SuperLink, guarded (``graphfed.flower.guard``); its certificate and CA are
    checked first, so an expired or missing one is named rather than failing in Flower."""
    from graphfed.flower.preflight import check_certificate

    check_certificate(creds.ca, "CA certificate")
    check_certificate(creds.server_cert, "SuperLink certificate")
    if not creds.server_key.is_file():
        raise GraphfedError(f"no SuperLink key at {creds.server_key} (graphfed federation "
                            "credentials makes it)")
    return [*guarded("superlink"), *superlink_flags(creds, host, port)]


def supernode_command(superlink: str, ca: Path, key: Path, data: Path, port: int) -> list[str]:
    """An owner's SuperNode, guarded so that it runs graphfed's app only: its own data file and
    private key; ``port`` is its local API. The ClientApp signs the server's identity challenge
    with the same key (``key-path``)."""
    return [*guarded("supernode"), "--superlink", superlink, "--root-certificates", str(ca),
            "--auth-supernode-private-key", str(key),
            "--node-config", f"data-path={json.dumps(str(Path(data).resolve()))} "
                             f"key-path={json.dumps(str(Path(key).resolve()))}",
            "--port", str(port)]


def flower_home(root: Path, superlink: str, ca: Path | None) -> dict[str, str]:
    """An environment whose Flower CLI config names ``superlink`` as connection 'graphfed'."""
    root.mkdir(parents=True, exist_ok=True)
    lines = ["[superlink]", f'default = "{CONNECTION}"', "", f"[superlink.{CONNECTION}]",
             f"address = {json.dumps(superlink)}"]
    lines.append(f"root-certificates = {json.dumps(str(Path(ca).resolve()))}" if ca is not None
                 else "insecure = true")
    (root / "config.toml").write_text("\n".join(lines) + "\n")
    return tool_env({**os.environ, "FLWR_HOME": str(root)})


def _flwr(args: list[str], env: dict[str, str], timeout: float | None = None
          ) -> subprocess.CompletedProcess:
    try:
        done = subprocess.run([tool("flwr"), *args], env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise GraphfedError(f"flwr {args[0]} did not finish within {timeout:.0f}s") from None
    if done.returncode != 0:
        raise GraphfedError(f"flwr {args[0]} failed: {(done.stderr or done.stdout).strip()}")
    return done


def register_node(public_key: Path, superlink: str, ca: Path, home: Path) -> None:
    """Admit the owner holding ``public_key``'s private key (operator side, on the SuperLink's
    host: its Control API answers nowhere else). The TLS preflight names a wrong or expired
    certificate first, which Flower reports only as an unavailable connection."""
    from graphfed.flower.preflight import check_superlink

    if not Path(public_key).is_file():
        raise GraphfedError(f"no public key at {public_key} (graphfed federation credentials "
                            "made owner-<i>.pub)")
    check_superlink(superlink, ca)
    _flwr(["supernode", "register", str(public_key), CONNECTION],
          flower_home(home, superlink, ca), timeout=60)
