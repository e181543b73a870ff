"""Who a SuperNode is, proven rather than claimed.

Flower's SuperNode authentication admits only nodes whose public key the operator registered,
but it does not tell the ServerApp which registered key a node holds. So before round 1 the
server sends every node a fresh random challenge; the node signs the challenge with its owner's
private key, together with the client id and partition it claims, and the server checks that
signature against the public key the operator made for that client (``owner-<i>.pub``). A node
can then only be the client whose key it holds, and only for the partition it signed.
"""

from __future__ import annotations

import os
from pathlib import Path

from graphfed.errors import GraphfedError

CHALLENGE_BYTES = 32


def new_challenge() -> bytes:
    return os.urandom(CHALLENGE_BYTES)


def _statement(challenge: bytes, client: int, partition: str) -> bytes:
    return challenge + f"|client={client}|partition={partition}".encode()


def sign_claim(key_path: str | Path, challenge: bytes, client: int, partition: str) -> bytes:
    """The node's signature (ECDSA, SHA-256) over the challenge and what it claims to be."""
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = serialization.load_ssh_private_key(Path(key_path).read_bytes(), password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise GraphfedError(f"{key_path} is not an owner's ECDSA private key")
    return key.sign(_statement(challenge, client, partition), ec.ECDSA(hashes.SHA256()))


def claim_is_signed(public_key: str, challenge: bytes, client: int, partition: str,
                    signature: bytes) -> bool:
    """Whether ``signature`` is owner ``client``'s (``public_key``, OpenSSH text) over the
    challenge and the claim."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    key = serialization.load_ssh_public_key(public_key.encode())
    if not isinstance(key, ec.EllipticCurvePublicKey):
        return False
    try:
        key.verify(signature, _statement(challenge, client, partition), ec.ECDSA(hashes.SHA256()))
    except InvalidSignature:
        return False
    return True


def read_owner_keys(directory: str | Path, num_clients: int) -> dict[int, str]:
    """Client id -> its owner's public key (``owner-<i>.pub`` in ``directory``), as the
    operator made and registered them (``graphfed federation credentials``)."""
    root = Path(directory)
    missing = [i for i in range(num_clients) if not (root / f"owner-{i}.pub").is_file()]
    if missing:
        raise GraphfedError(f"flower.owner_keys={directory} lacks owner-<i>.pub for clients "
                            f"{missing}; point it at the directory `graphfed federation "
                            f"credentials` wrote")
    return {i: (root / f"owner-{i}.pub").read_text().strip() for i in range(num_clients)}
