"""Client-level differential privacy and the run's privacy ledger.

``options``: the ``dp`` and ``privacy`` config sections; ``dp_fedavg``: DP-FedAvg's clipping,
noise and adaptive clip (what an averaging server's aggregation becomes under ``dp``);
``accounting``: ``dp-accounting`` behind one clear error when it is missing; ``ledger``: every
noised release a run made, composed into (epsilon, delta) per round, per message and in total.
The client of the local variant (each client noises its own update) lives beside the attack
simulation, ``graphfed.runtime.dp_client``: it wraps any algorithm's client the same way.
"""
