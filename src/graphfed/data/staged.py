"""A dataset's raw files under the data root, as the processing cache sees them.

PyG processes raw files once and then reuses its ``processed/`` folder without looking at them
again, so a cache that outlives its source serves stale data: built from a damaged copy it kept
failing after ``GRAPHFED_DATA`` pointed back at a good one, and built from a good copy it hid a
damaged one. The cache is therefore keyed by where the raw files are and by a cheap fingerprint
of them (name, size and modification time of each): a changed root or a changed file gets a build
of its own. Before a build the files are checked against the data root's ``SHA256SUMS`` (the
format of ``sha256sum``) where it has one, as the staged datasets do, so a damaged file is named
instead of failing deep inside PyG; a key once verified and built is marked, and later loads cost
one ``stat`` per file. Whatever the root, ``is_public`` tells a raw pickle that is the public file
(``raw_checksums``) from one to read with the restricted unpickler first.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from graphfed.data.raw_checksums import PUBLIC_SHA256
from graphfed.errors import GraphfedError

CHECKSUMS = "SHA256SUMS"
BUILT = ".built.json"  # in a cache folder once its raw files were verified and processed


class DamagedCopy(GraphfedError):
    """A raw file that does not match the data root's checksums, or a listed one that is gone."""


@dataclass(frozen=True)
class StagedRaw:
    """The raw folder ``raw`` of dataset ``dataset`` under the data root ``root``."""

    dataset: str
    root: Path
    raw: Path

    def fingerprint(self) -> dict[str, tuple[int, int]]:
        """File name -> (size, modification time in ns) of every file in the raw folder."""
        stats = {p.name: p.stat() for p in sorted(self.raw.iterdir()) if p.is_file()}
        return {name: (s.st_size, s.st_mtime_ns) for name, s in stats.items()}

    def key(self) -> str:
        """Names the cache folder built from exactly these files at exactly this place."""
        blob = json.dumps([str(self.raw), self.fingerprint()], sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def verify(self) -> int:
        """Check every raw file ``SHA256SUMS`` lists against its digest; the number checked
        (0 where the root has no such file). A mismatch or a listed file that is gone is one
        ``DamagedCopy`` naming the file and how to restore it."""
        listed = self._listed()
        check = f"check the copy with: cd {self.root} && sha256sum -c {CHECKSUMS}"
        for path, digest in sorted(listed.items()):
            if not path.is_file():
                raise DamagedCopy(f"dataset '{self.dataset}': {path} is listed in "
                                    f"{self.root / CHECKSUMS} but missing; restore it, then "
                                    f"{check}")
            if _sha256(path) != digest:
                raise DamagedCopy(
                    f"dataset '{self.dataset}': {path} does not match its checksum in "
                    f"{self.root / CHECKSUMS} (damaged or changed); restore it from the copy "
                    f"GRAPHFED_DATA was made from, then {check}")
        return len(listed)

    def _listed(self) -> dict[Path, str]:
        """Digest of each file of this raw folder that the root's checksum file lists."""
        sums = self.root / CHECKSUMS
        if not sums.is_file():
            return {}
        listed = {}
        for line in sums.read_text(encoding="utf-8", errors="replace").splitlines():
            digest, _, name = line.strip().partition(" ")
            path = self.root / Path(name.lstrip(" *"))  # "*" marks sha256sum's binary mode
            if digest and path.parent == self.raw:
                listed[path] = digest.lower()
        return listed


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_public(path: Path) -> bool:
    """Whether ``path`` is byte for byte the public raw file of its name (``raw_checksums``)."""
    expected = PUBLIC_SHA256.get(path.name)
    return expected is not None and _sha256(path) == expected


def mark_built(folder: Path, staged: StagedRaw, checked: int) -> None:
    """Record, for people reading the cache, what a folder was built from."""
    (folder / BUILT).write_text(json.dumps({
        "root": str(staged.root), "raw": str(staged.raw), "files": staged.fingerprint(),
        "checksums_verified": checked}, indent=2))


def is_built(folder: Path) -> bool:
    return (folder / BUILT).is_file()
