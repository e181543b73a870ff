"""SCAFFOLD's control variates (Karimireddy et al., "SCAFFOLD: Stochastic controlled averaging
for federated learning", ICML 2020).

A client's control c_i estimates its own gradient, the server's c their average; each local step
descends g_i(y) + c - c_i, so a client follows the federation's direction instead of drifting
to its own optimum (Alg. 1 line 10). After K local steps of rate eta_l from x to y_i, option II
of Eq. 4 re-estimates c_i from the distance covered: c_i+ = c_i - c + (x - y_i) / (K eta_l).
"""

from __future__ import annotations

import torch

from graphfed.tensors import Params


def correction(server: Params, client: Params) -> Params:
    """c - c_i: what SCAFFOLD adds to each local gradient (Alg. 1 line 10)."""
    return {k: server[k] - client[k] for k in server}


def control_delta(start: Params, trained: Params, server: Params, steps: int,
                  lr: float) -> Params:
    """Delta c_i = c_i+ - c_i = (x - y_i) / (K eta_l) - c (Eq. 4 option II; Alg. 1 lines 12-13).

    ``start`` is x, ``trained`` y_i, ``server`` c. With no step taken (K = 0, a client
    without training data) the distance says nothing of the gradient: the delta is zero and c_i
    stays as it was."""
    if steps == 0:
        return {k: torch.zeros_like(v) for k, v in server.items()}
    scale = 1.0 / (steps * lr)
    return {k: (start[k] - trained[k]) * scale - server[k] for k in server}


def add(params: Params, delta: Params, rate: float = 1.0) -> Params:
    """``params + rate * delta``: c_i+ = c_i + Delta c_i on a client, and the server's
    c <- c + (|S|/N) mean Delta c_i (Alg. 1 line 17)."""
    return {k: v + rate * delta[k] for k, v in params.items()}
