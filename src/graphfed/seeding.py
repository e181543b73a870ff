"""Random streams named by (run seed, round, party, phase), so that a party's randomness depends
on who it is and when, never on which parties ran before it or beside it."""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

PHASES = {"setup": 0, "fit": 1, "evaluate": 2}
SERVER = 2**32 - 1  # the server's party id (clients are 0..N-1)


def call_seed(seed: int, rnd: int, party: int, phase: str) -> int:
    """A 64-bit seed for one party's part of one round, from NumPy's SeedSequence hashing."""
    words = np.random.SeedSequence([seed, rnd, party, PHASES[phase]]).generate_state(2)
    return int(words[0]) << 32 | int(words[1])


@contextmanager
def preserved_rngs() -> Iterator[None]:
    """Run a block that may reseed Python's, NumPy's, torch's CPU and (when in use) CUDA's
    generators, then give the caller its own RNG states back."""
    py_state, np_state, cpu_state = random.getstate(), np.random.get_state(), torch.get_rng_state()
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    cuda_states = torch.cuda.get_rng_state_all() if cuda else None
    try:
        yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
        torch.set_rng_state(cpu_state)
        if cuda_states is not None:
            torch.cuda.set_rng_state_all(cuda_states)


def reseed(seed: int, rnd: int, party: int, phase: str) -> None:
    """Seed Python's, NumPy's, torch's CPU and (when available) CUDA's generators from (run
    seed, round, party, phase), the caller's states not kept (``seeded_call`` keeps them).

    The CPU generator is seeded directly (``torch.manual_seed`` also walks every other backend,
    lazily, at a cost per call that a round pays for every party); CUDA's generators are seeded
    as ``torch.manual_seed`` seeds them."""
    seed_all(call_seed(seed, rnd, party, phase))


def seed_all(value: int) -> None:
    """``reseed`` from a ``call_seed`` already computed (the batched engine's clients carry
    theirs: hashing it again costs a SeedSequence a client)."""
    random.seed(value)
    np.random.seed(value % 2**32)
    torch.default_generator.manual_seed(value)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(value)


@contextmanager
def seeded_call(seed: int, rnd: int, party: int, phase: str) -> Iterator[None]:
    """Run one party's part of a round under RNGs seeded from (run seed, round, party, phase).

    A client's randomness (dropout, shuffling) then does not depend on which clients ran before
    it, and the server's (its own training, resampling) not on what ran in its process before
    the round, so every runtime, whatever order or process it runs parties in, gives the same
    result. The caller's RNG states are restored afterwards (``preserved_rngs``); a runtime
    that calls several parties in a row may keep the caller's states once around all of them
    and ``reseed`` before each: the same streams, one save and restore."""
    with preserved_rngs():
        reseed(seed, rnd, party, phase)
        yield
