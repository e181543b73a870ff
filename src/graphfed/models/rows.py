"""Which client owns each row of a joined tensor: many clients' rows laid end to end.

The batched engine's joined layout (``training.joined``) concatenates the clients' node rows
(and their graphs' rows) instead of padding each client to the largest; a ``Rows`` tells every
per-client operation where one client's rows end and the next one's begin.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Rows:
    """``owner[r]``: the client of row r; ``local[r]``: its position among that client's rows;
    ``ends``: each client's cumulative row count (int32, ``F.grouped_mm``'s offsets)."""

    owner: Tensor
    local: Tensor
    ends: Tensor

    @classmethod
    def of(cls, counts: Tensor) -> Rows:
        """The rows of clients holding ``counts[k]`` rows each, client by client."""
        ends = counts.cumsum(0)
        owner = torch.repeat_interleave(torch.arange(len(counts), device=counts.device), counts)
        local = torch.arange(len(owner), device=counts.device) - (ends - counts)[owner]
        return cls(owner, local, ends.to(torch.int32))

    @property
    def count(self) -> int:
        return len(self.owner)
