"""Flower entry points and tooling: the ServerApp and ClientApp, the simulation engine, a real
deployment (credentials, SuperLink, SuperNodes), owner files and the loopback federation. Nothing
below imports this package; the transport itself is ``graphfed.runtime.flower``."""
