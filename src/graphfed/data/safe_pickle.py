"""Read a raw dataset pickle admitting only the classes such files hold, before PyG's reader
unpickles it without restriction.

Unpickling calls whatever a file names, so a raw pickle that is not a public file graphfed knows
(``raw_checksums``) is read here first. Every class or function it asks for must be one of
``ADMITTED``: what the Planetoid files hold (numpy arrays, scipy CSR matrices, a defaultdict of
lists), under the module names Python 2 wrote them with and the ones numpy, scipy and Python 3
write today. Anything else is refused when the pickle names it, before it is built or called, so
nothing in the file runs.
"""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path
from typing import Any

from graphfed.errors import GraphfedError

ADMITTED: frozenset[tuple[str, str]] = frozenset({
    # a numpy array: rebuilt from its shape, dtype and bytes
    ("numpy", "ndarray"), ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.numeric", "_frombuffer"), ("numpy._core.numeric", "_frombuffer"),
    # the features: a CSR matrix of such arrays
    ("scipy.sparse.csr", "csr_matrix"), ("scipy.sparse._csr", "csr_matrix"),
    # the graph: node -> list of neighbours
    ("collections", "defaultdict"), ("__builtin__", "list"), ("builtins", "list"),
})


class UnsafePickle(GraphfedError):
    """A raw pickle that asks for a class or function no raw dataset file holds."""


class _Refused(Exception):
    """Raised by the unpickler at the first global outside ``ADMITTED``."""


class _DatasetUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        # the names as the file spells them (Python 2's ``__builtin__`` too), checked before
        # anything is imported
        if (module, name) not in ADMITTED:
            raise _Refused(f"{module}.{name}")
        return super().find_class(module, name)


def check_pickle(path: Path, dataset: str) -> None:
    """Unpickle ``path`` with only ``ADMITTED`` globals, and check a CSR matrix in it the way a
    reader relies on (indices in bounds). A refused global is one ``UnsafePickle`` naming the
    file; a damaged file raises ``pickle.UnpicklingError`` naming it, for the caller to word as
    it words damaged raw files; an unreadable one, the ``OSError``."""
    from scipy.sparse import csr_matrix

    try:
        with path.open("rb") as f, warnings.catch_warnings():
            # the public files name numpy.core and scipy.sparse.csr, deprecated spellings
            warnings.simplefilter("ignore", DeprecationWarning)
            # latin1: the arrays' bytes were pickled as Python 2 strings (as PyG reads them)
            loaded = _DatasetUnpickler(f, encoding="latin1").load()
        if isinstance(loaded, csr_matrix):
            # its attributes are the file's own: indices out of bounds would make the reader's
            # todense() write outside its array
            loaded.check_format(full_check=True)
    except _Refused as e:
        raise UnsafePickle(
            f"dataset '{dataset}': {path} is not a raw file graphfed can read safely: its "
            f"pickle asks for {e}, which no dataset file holds (only numpy arrays, scipy CSR "
            f"matrices and lists); nothing in it was run; replace it with the published file"
        ) from None
    except OSError:
        raise
    except Exception as e:
        raise pickle.UnpicklingError(f"{path.name}: {type(e).__name__}: {e}") from None
