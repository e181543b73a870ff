"""A preset's wall time with ``graphfed reproduce --jobs N`` against ``--jobs 1`` (issue 20's
parallel-cells target), each into a fresh output folder, and whether the two tables agree:

    GRAPHFED_DATA=../shared/datasets python benchmarks/reproduce_jobs.py PRESET [--jobs 2]
        [-- any further reproduce options, e.g. --datasets Cora --seeds 2]

ends with ``RESULT case=<preset> jobs=<N> one_s=<s> many_s=<s> ratio=<many/one>
same_table=<true|false>``. Run it on an idle machine: the two runs are timed one after the other.
A preset whose table reports run time (``minutes``, ``seconds_per_round``) never has the same
table twice; pick one that does not.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed_reproduce(preset: str, options: list[str], jobs: int, out: Path) -> float:
    """Seconds one ``graphfed reproduce`` takes, start to table, in a process of its own."""
    command = [sys.executable, "-m", "graphfed.cli", "reproduce", preset, *options,
               "--jobs", str(jobs), "--out", str(out), "--quiet"]
    start = time.perf_counter()
    subprocess.run(command, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("preset")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("options", nargs=argparse.REMAINDER,
                        help="after --: options passed to graphfed reproduce")
    args = parser.parse_args()
    options = [o for o in args.options if o != "--"]
    with tempfile.TemporaryDirectory(prefix="reproduce-jobs-") as tmp:
        one = timed_reproduce(args.preset, options, 1, Path(tmp) / "one")
        many = timed_reproduce(args.preset, options, args.jobs, Path(tmp) / "many")
        same = ((Path(tmp) / "one" / "table.csv").read_text()
                == (Path(tmp) / "many" / "table.csv").read_text())
    print(f"RESULT case={args.preset} jobs={args.jobs} one_s={one:.1f} many_s={many:.1f} "
          f"ratio={many / one:.2f} same_table={str(same).lower()}")


if __name__ == "__main__":
    main()
