"""The ``flower`` config section: how a run uses Flower (no flwr import, so configs validate
without it installed)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from graphfed.validation import OPTIONS

# ten minutes: far beyond a round of the bundled configs on one CPU (seconds, plus a ClientApp's
# start), yet one hung ClientApp costs a bounded wait, not the whole run
DEFAULT_ROUND_TIMEOUT = 600.0


class FlowerOptions(BaseModel):
    model_config = OPTIONS

    client_cpus: float = Field(1.0, gt=0, description="flower-sim: CPU cores per client")
    client_gpus: float = Field(0.0, ge=0, description="flower-sim: GPU share per client")
    round_timeout: float = Field(
        DEFAULT_ROUND_TIMEOUT, gt=0, description="seconds one exchange (setup, a round's fit "
        "or evaluate) waits for replies; a node that errs, dies or hangs past it is dropped for "
        "that round and logged. The default suits rounds of minutes; raise it for longer ones")
    min_replies: int = Field(1, ge=1, description="fewest fit replies a round may aggregate")
    retries: int = Field(0, ge=0, description="re-asks of missing clients before stopping")
    connect_timeout: float = Field(120.0, gt=0, description="flower: seconds to wait for "
                                   "every SuperNode to connect")
    run_timeout: float | None = Field(None, gt=0, description="flower: seconds the submitted "
                                      "run may take before graphfed stops waiting for it")
    superlink: str = Field("127.0.0.1:9093", description="flower: SuperLink control address")
    root_certificates: str | None = Field(
        None, description="flower: CA certificate the SuperLink's TLS certificate is signed by")
    owner_keys: str | None = Field(
        None, description="flower: directory of the owners' public keys (owner-<i>.pub, from "
        "graphfed federation credentials); a node is admitted as client i only if it signs "
        "the server's challenge with owner i's private key")
