"""Only the operator's graphfed app runs, and only the operator submits it.

Flower (1.42, the open-source build) serves the Control API (submit runs, register nodes), the
Runtime API (what a ServerApp process talks to) and the Fleet API (what SuperNodes talk to) on
one HTTPS port, with no authentication of the first two; and a SuperNode runs whatever app a
SuperLink hands it, unless the app carries a Flower Hub signature (``--trusted-entities``), which
a locally built app never does. So anyone holding the CA certificate and the SuperLink's address
could run code on the SuperLink's host and on every owner's machine.

graphfed therefore starts Flower's own ``flower-superlink`` and ``flower-supernode`` entry points
from this module (``python -m graphfed.flower.guard superlink|supernode FLAGS``) after adding
three checks at hooks Flower calls:

- the SuperLink answers Control and Runtime API requests only from its own host (a loopback
  peer, or a peer whose address is the one the connection arrived on); SuperNodes reach the Fleet
  API from anywhere, as before (TLS and node authentication guard it);
- the SuperLink starts a run only if its app is graphfed's (``is_graphfed_app``);
- a SuperNode refuses, through Flower's own app-verification path, every app that is not
  graphfed's: it answers the run's messages with Flower's "FAB could not be verified" error
  and never stores the app, so no process of that app starts.

graphfed's app is a Flower app bundle holding one file, ``pyproject.toml``, whose content is
``deployment.APP_PYPROJECT``: its components name the installed ``graphfed.flower`` modules and it
carries no code of its own, so only the code each party installed runs. If a Flower release
moves one of these hooks, the process refuses to start (fail closed) rather than run unguarded.
"""

from __future__ import annotations

import hashlib
import io
import ipaddress
import sys
import zipfile
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from graphfed.errors import GraphfedError

FAB_MANIFEST = ".info/CONTENT"  # the file list Flower adds to every app bundle
MAX_PYPROJECT = 64 * 1024  # graphfed's is under 1 KiB; a larger one is not it
OPEN_PATHS = ("/v1/fleet/", "/health")  # what a SuperNode elsewhere may call
REFUSED_LOCAL_ONLY = ("graphfed: this SuperLink's Control and Runtime APIs answer only on its "
                      "own host (submit runs and register nodes there)")

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
                   Awaitable[None]]


def app_refusal(fab: bytes) -> str | None:
    """Why ``fab`` (a Flower app bundle) is not graphfed's app, or None when it is: exactly a
    ``pyproject.toml`` equal (as TOML) to ``APP_PYPROJECT`` plus Flower's manifest, no other
    file (so no code of its own), no dependencies to install."""
    import tomli  # what Flower itself reads an app's pyproject.toml with

    from graphfed.flower.deployment import APP_PYPROJECT

    try:
        with zipfile.ZipFile(io.BytesIO(fab)) as bundle:
            names = bundle.namelist()
            if len(names) != len(set(names)) or set(names) - {"pyproject.toml", FAB_MANIFEST}:
                extra = sorted(set(names) - {"pyproject.toml", FAB_MANIFEST})
                return f"it carries files of its own ({', '.join(extra[:5]) or 'duplicates'})"
            if "pyproject.toml" not in names:
                return "it has no pyproject.toml"
            if bundle.getinfo("pyproject.toml").file_size > MAX_PYPROJECT:
                return "its pyproject.toml is not graphfed's"
            project = tomli.loads(bundle.read("pyproject.toml").decode("utf-8"))
    except (zipfile.BadZipFile, tomli.TOMLDecodeError, UnicodeDecodeError, ValueError):
        return "it is not a readable Flower app bundle"
    flwr = project.get("tool", {}).get("flwr") if isinstance(project.get("tool"), dict) else None
    if isinstance(flwr, dict):
        flwr.pop("federations", None)  # Flower drops it when it builds a bundle
    if project != tomli.loads(APP_PYPROJECT):
        try:
            components = f" (components: {flwr['app']['components']})"  # type: ignore[index]
        except (KeyError, TypeError):
            components = ""
        return f"its pyproject.toml is not graphfed's{components}"
    return None


def is_graphfed_app(fab: bytes) -> bool:
    return app_refusal(fab) is None


def _address(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return None
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 is 127.0.0.1
    return mapped or address


def from_own_host(scope: Scope) -> bool:
    """Whether an ASGI connection comes from the SuperLink's own host: no peer address (a unix
    socket), a loopback peer, or a peer whose address is the one it connected to (a process on
    this host using the host's own address). A remote peer cannot present this host's address
    through a completed TCP handshake."""
    client, server = scope.get("client"), scope.get("server")
    if not client:
        return True
    peer = _address(str(client[0]))
    if peer is None:
        return False
    if peer.is_loopback:
        return True
    return bool(server) and peer == _address(str(server[0]))


def may_call(scope: Scope) -> bool:
    """Whether this request may reach the SuperLink: a Fleet API call or the health check from
    anywhere, anything else from its own host only."""
    path = str(scope.get("path", ""))
    return (path.startswith(OPEN_PATHS) and "/." not in path) or from_own_host(scope)


class OwnHostOnly:
    """ASGI middleware: Control and Runtime API requests from another host get 403; the Fleet
    API and the health check pass."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope.get("type") == "websocket" and not may_call(scope):
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope.get("type") == "http" and not may_call(scope):
            body = REFUSED_LOCAL_ONLY.encode()
            await send({"type": "http.response.start", "status": 403,
                        "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        await self.app(scope, receive, send)


def _hook(module: Any, name: str) -> Any:
    """``module.name``, or a refusal to start: without the hook the process would run
    unguarded."""
    from flwr.supercore.version import package_version

    if not callable(getattr(module, name, None)):
        raise GraphfedError(f"Flower {package_version} has no {module.__name__}.{name}, which "
                            "graphfed needs to restrict who submits runs and which app runs; "
                            "install the Flower version graphfed names (pip install "
                            "'graphfed[flower]')")
    return getattr(module, name)


def guard_superlink() -> None:
    """Add the own-host rule for the Control/Runtime APIs and the app check at run start."""
    import flwr.superlink.extensions as extensions
    import flwr.superlink.servicer.control.control_handlers as handlers
    from starlette.middleware import Middleware

    extra_middleware = _hook(extensions, "get_middleware")
    read_config = _hook(handlers, "get_fab_config")

    def middleware() -> tuple[Middleware, ...]:
        return (Middleware(OwnHostOnly), *extra_middleware())  # outermost: runs first

    def pinned_config(fab_file: Any) -> dict[str, Any]:
        """Every way of starting a run reads the app's config here first."""
        reason = (app_refusal(bytes(fab_file)) if isinstance(fab_file, bytes | bytearray)
                  else "it is not an app bundle")
        if reason:
            raise ValueError(f"graphfed: this SuperLink runs only graphfed's app; refused: "
                             f"{reason}")
        return read_config(fab_file)

    extensions.get_middleware = middleware
    handlers.get_fab_config = pinned_config


def guard_supernode() -> None:
    """Route every app a SuperNode receives through Flower's verification step, with graphfed's
    app as the only one that passes."""
    from logging import ERROR

    import flwr.supernode.start_client_internal as node
    from flwr.common.logger import log
    from flwr.supercore.fab import Fab

    pull = _hook(node, "_pull_and_store_message")
    _hook(node, "_verify_fab")

    def vouched(get_fab: Callable[[str, int], Fab]) -> Callable[[str, int], Fab]:
        def fetch(fab_hash: str, run_id: int) -> Fab:
            fab = get_fab(fab_hash, run_id)
            # Flower verifies only bundles a SuperLink marks as checkable; graphfed checks all
            return Fab(fab.hash_str, fab.content, {**fab.verifications, "valid_license": "1"})
        return fetch

    def verify(fab: Fab, trusted: dict[str, str]) -> bool:
        try:
            reason = (app_refusal(fab.content)
                      if hashlib.sha256(fab.content).hexdigest() == fab.hash_str
                      else "its content does not match its hash")
        except Exception as e:  # refuse what cannot be checked, and keep the node up
            reason = f"it could not be checked ({type(e).__name__})"
        if reason:
            log(ERROR, "graphfed: refused an app that is not graphfed's (%s): %s", fab.hash_str,
                reason)
        return reason is None

    def pull_verified(**kwargs: Any) -> Any:
        kwargs["get_fab"] = vouched(kwargs["get_fab"])
        kwargs["trusted_entities"] = {"graphfed": "the operator's graphfed app"}
        return pull(**kwargs)

    node._pull_and_store_message = pull_verified
    node._verify_fab = verify


def main(argv: list[str] | None = None) -> None:
    """``python -m graphfed.flower.guard superlink|supernode FLAGS``: Flower's own command with
    graphfed's checks in place."""
    args = list(sys.argv[1:] if argv is None else argv)
    role = args.pop(0) if args else ""
    try:
        import flwr  # noqa: F401

        if role == "superlink":
            guard_superlink()
            from flwr.superlink.cli import flower_superlink as start
        elif role == "supernode":
            guard_supernode()
            from flwr.supernode.cli import flower_supernode as start
        else:
            raise GraphfedError("usage: python -m graphfed.flower.guard superlink|supernode "
                                "FLOWER-FLAGS")
    except ImportError:
        print("error: Flower is not installed; install it with pip install "
              "'graphfed[flower]'", file=sys.stderr)
        raise SystemExit(2) from None
    except GraphfedError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    sys.argv = [f"flower-{role}", *args]
    start()


if __name__ == "__main__":
    main()
