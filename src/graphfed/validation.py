"""What every options section shares, so that bad input fails while the config is read, not
hours into a run: unknown keys refused, numbers finite, seeds in the range every generator takes.

``optimizer.lr=.inf`` or a NaN inside ``partition.split`` used to validate and then fail in round
1 (or quietly train on NaN); a seed of -1 or 2**32 used to fail in ``np.random.seed`` after the
data was built.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Annotated

from pydantic import ConfigDict, Field

# every float field of a section that uses it refuses NaN and +-inf, including inside lists
OPTIONS = ConfigDict(extra="forbid", allow_inf_nan=False)

# NumPy's legacy seeding (np.random.seed, RandomState), which the run and some partitions use,
# takes 0 <= seed < 2**32; torch.manual_seed and SeedSequence take that range too
SEED_LIMIT = 2**32
Seed = Annotated[int, Field(ge=0, lt=SEED_LIMIT)]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'rounds'?)`` for the choice closest to a mistyped ``word``, else ''."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def loose(name: str) -> str:
    """A name as people type it, compared in any case, with or without '-', '_' or spaces:
    ``FedAvg``, ``fed_prox`` and ``fedpub`` name fedavg, fedprox and fed-pub."""
    return re.sub(r"[-_\s]", "", name.lower())
