"""``graphfed federation ...``: what the operator and each data owner run for a real federation
(thin wrappers over Flower's own ``flower-superlink`` / ``flower-supernode`` / ``flwr``)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Annotated

import typer

from graphfed.cli.common import command_group, console, print_final, readable, split_args
from graphfed.errors import GraphfedError

federation = command_group(no_args_is_help=True, help="Run a real federation on Flower: "
                         "credentials, partition files, SuperLink, SuperNodes.")


def _require() -> None:
    """Flower runs inside this interpreter (``graphfed.flower.guard`` starts its entry points)."""
    if importlib.util.find_spec("flwr") is None:
        raise GraphfedError("Flower is not installed; install it with "
                            "pip install 'graphfed[flower]'")


def _exec(command: list[str]) -> None:
    """Become the Flower process (signals and exit code are then Flower's own)."""
    _require()
    from graphfed.flower.deployment import tool_env

    os.execvpe(command[0], command, tool_env())


@federation.command()
@readable
def export(
    args: Annotated[list[str], typer.Argument(help="CONFIG.yaml and key=value overrides")],
    out: Annotated[Path, typer.Option(help="directory for client-<i>.pt")] = Path("owners"),
) -> None:
    """Write one file per client of the config's partition: hand client-<i>.pt to owner i."""
    from graphfed.config import load_config
    from graphfed.flower.owner import export_partition

    config_path, overrides = split_args(args)
    config = load_config(config_path, overrides)
    for path in export_partition(config, config.run_seeds[0], out):
        typer.echo(path)


@federation.command()
@readable
def credentials(
    out: Annotated[Path, typer.Argument(help="directory for the keys and certificates")],
    owners: Annotated[int, typer.Option(help="number of data owners (node key pairs)")],
    host: Annotated[list[str] | None, typer.Option(
        help="SuperLink host name or IP the TLS certificate is for (repeatable)")] = None,
    force: Annotated[bool, typer.Option(
        "--force", help="replace credentials already in OUT (every owner then needs its new "
                        "key and ca.crt)")] = False,
) -> None:
    """Make a CA, the SuperLink's TLS certificate and one key pair per owner (never commit them:
    superlink.key stays with the operator, owner-<i>.key with owner i). Credentials already in
    OUT are kept unless --force."""
    from graphfed.flower.deployment import make_credentials

    make_credentials(out, owners, tuple(host or ("127.0.0.1", "localhost")), force=force)
    typer.echo(f"credentials in {out}")


@federation.command()
@readable
def superlink(
    creds: Annotated[Path, typer.Option("--credentials", help="from `federation credentials`")],
    host: Annotated[str, typer.Option(help="address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="port of the SuperLink's APIs")] = 9093,
    database: Annotated[Path | None, typer.Option(
        help="the SuperLink's state (registered owners, runs), kept across a restart; default "
             "superlink-state.db in the credentials directory")] = None,
) -> None:
    """Operator: start the SuperLink with TLS and SuperNode authentication; its Control API
    (submitting runs, registering nodes) answers only on this host, and it runs only graphfed's
    app. Its state lives in a file, so a restarted SuperLink knows its owners and they rejoin."""
    from graphfed.flower.deployment import Credentials, superlink_command

    state = database if database is not None else creds / "superlink-state.db"
    _exec([*superlink_command(Credentials(creds), host, port), "--database", str(state)])


@federation.command()
@readable
def register(
    public_key: Annotated[Path, typer.Argument(help="an owner's owner-<i>.pub")],
    superlink: Annotated[str, typer.Option(help="SuperLink address host:port")],
    ca: Annotated[Path, typer.Option(help="CA certificate (ca.crt)")],
    home: Annotated[Path, typer.Option(help="Flower CLI config directory to use")
                    ] = Path(".graphfed-flwr"),
) -> None:
    """Operator, on the SuperLink's host: admit the owner holding this public key's private
    key."""
    from graphfed.flower.deployment import register_node

    register_node(public_key, superlink, ca, home)
    typer.echo(f"registered {public_key}")


@federation.command()
@readable
def node(
    data: Annotated[Path, typer.Option(help="this owner's client-<i>.pt")],
    key: Annotated[Path, typer.Option(help="this owner's private key (owner-<i>.key)")],
    ca: Annotated[Path, typer.Option(help="CA certificate the SuperLink's is signed by")],
    superlink: Annotated[str, typer.Option(help="SuperLink address host:port")
                         ] = "127.0.0.1:9093",
    port: Annotated[int, typer.Option(help="local port of this node's ClientApp API")] = 9094,
) -> None:
    """Owner: start this owner's SuperNode on its own data and credentials; it runs graphfed's
    app only."""
    from graphfed.flower.deployment import supernode_command
    from graphfed.flower.owner import load_owner
    from graphfed.flower.preflight import check_superlink
    from graphfed.flower.processes import run_supernode

    if not data.is_file():
        raise GraphfedError(f"no data file at {data} (make one with `graphfed federation export`)")
    if not key.is_file():
        raise GraphfedError(f"no private key at {key} (the operator's `graphfed federation "
                            "credentials` made owner-<i>.key)")
    load_owner(data)  # a damaged or foreign file fails here, in one line
    check_superlink(superlink, ca)  # a wrong CA or address is named before Flower starts
    command = supernode_command(superlink, ca, key, data, port)
    _require()
    # Flower's own log passed on as it comes; a restart right after a crash waits out the
    # SuperLink's heartbeat window (graphfed.flower.processes.run_supernode)
    code = run_supernode(command, superlink, key, lambda line: typer.echo(line, nl=False))
    raise typer.Exit(code)


@federation.command()
@readable
def loopback(
    args: Annotated[list[str], typer.Argument(help="CONFIG.yaml and key=value overrides")],
    root: Annotated[Path, typer.Option(help="directory for credentials, owner files and logs")
                    ] = Path("federation"),
    port: Annotated[int, typer.Option(help="the SuperLink's port")] = 9093,
    node_port: Annotated[int, typer.Option(help="first local port of the SuperNodes")] = 9400,
    out: Annotated[Path, typer.Option(help="directory under which the run directory is made")
                   ] = Path("runs"),
) -> None:
    """The whole recipe on this machine: credentials, one data file per owner, a SuperLink and
    one SuperNode per owner as separate processes (TLS + node authentication), the run, then
    every process stopped. Logs stay in ROOT."""
    from graphfed.config import load_config
    from graphfed.flower.loopback import LoopbackFederation

    config_path, overrides = split_args(args)
    config = load_config(config_path, overrides)
    typer.echo(f"starting a SuperLink and {config.num_clients} SuperNodes (logs in {root})")
    with LoopbackFederation(config, root, port, node_port, say=typer.echo) as fed:
        run_dir, summary = fed.run(out=out, progress=True)
        typer.echo("stopping the SuperNodes and the SuperLink")
    print_final(summary)
    console.print(f"run directory: [bold]{run_dir}[/]")
