"""Startup cost of peregistry, measured against ``import numpy`` in the same run.

Each repetition starts two fresh interpreters, interleaved (so drift of the machine affects both
alike):

* ``python -c "import peregistry; peregistry.get_encoder('rotary', dim=64)"``
* ``python -c "import numpy"``

and the script prints the median wall time of each, their ratio, and the goal of issue 17 (ratio <= 1.3),
and the ratio of the fastest runs (on a shared machine the least disturbed). With ``--assert-goal``
it exits 1 when the median ratio misses the goal. Run it with the interpreter of the environment to
measure::

    python benchmarks/bench_startup.py --repeat 20 --assert-goal

The snippets run in the temporary directory (``python -c`` puts the working directory first on
``sys.path``: run from a checkout, it would import the checkout rather than the installed
package), with ``PYTHONDONTWRITEBYTECODE`` removed from their environment: the warm-up runs write
the bytecode caches an installed package has, so that the measured runs time a warm install, not
the compiling of an editable checkout's sources (~40 ms more, were the variable set).

If the goal is missed, ``python -X importtime -c "import peregistry; ..."`` shows which
imports dominate.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence

GOAL = 1.3
PEREGISTRY_SNIPPET = "import peregistry; peregistry.get_encoder('rotary', dim=64)"
NUMPY_SNIPPET = "import numpy"
#: The environment of the snippets: this one, with bytecode caches written (see above).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def wall_time(python: str, snippet: str) -> float:
    """Seconds for a fresh ``python -c snippet`` to run to completion (it must succeed)."""
    start = time.perf_counter()
    proc = subprocess.run([python, "-c", snippet], capture_output=True, text=True, check=False,
                          env=ENV, cwd=tempfile.gettempdir())
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{python} -c {snippet!r} failed (exit {proc.returncode}):\n"
                         f"{proc.stderr}")
    return elapsed


def measure(python: str, repeat: int, warmup: int) -> tuple[list[float], list[float]]:
    """Interleaved wall times of the peregistry and the numpy snippet, ``repeat`` each."""
    for _ in range(warmup):  # fill the OS file cache; not counted
        wall_time(python, PEREGISTRY_SNIPPET)
        wall_time(python, NUMPY_SNIPPET)
    ours: list[float] = []
    numpy: list[float] = []
    for i in range(repeat):
        # Alternate which goes first, so neither always runs on a "warmer" machine.
        if i % 2 == 0:
            ours.append(wall_time(python, PEREGISTRY_SNIPPET))
            numpy.append(wall_time(python, NUMPY_SNIPPET))
        else:
            numpy.append(wall_time(python, NUMPY_SNIPPET))
            ours.append(wall_time(python, PEREGISTRY_SNIPPET))
    return ours, numpy


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; return 1 if ``--assert-goal`` is given and the goal is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=20,
                        help="runs of each snippet (default 20)")
    parser.add_argument("--warmup", type=int, default=2,
                        help="uncounted runs of each snippet first (default 2)")
    parser.add_argument("--python", default=sys.executable,
                        help="interpreter to measure (default: this one)")
    parser.add_argument("--assert-goal", action="store_true",
                        help=f"exit 1 if the ratio is above {GOAL}")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")

    ours, numpy = measure(args.python, args.repeat, args.warmup)
    med_ours = statistics.median(ours)
    med_numpy = statistics.median(numpy)
    ratio = med_ours / med_numpy
    met = ratio <= GOAL
    print(f"python: {args.python}  ({args.repeat} interleaved runs each, {args.warmup} warm-up)")
    print(f"  {PEREGISTRY_SNIPPET:<66} median {med_ours * 1e3:7.1f} ms  "
          f"(min {min(ours) * 1e3:.1f}, max {max(ours) * 1e3:.1f})")
    print(f"  {NUMPY_SNIPPET:<66} median {med_numpy * 1e3:7.1f} ms  "
          f"(min {min(numpy) * 1e3:.1f}, max {max(numpy) * 1e3:.1f})")
    print(f"ratio: {ratio:.2f}x  (goal <= {GOAL}x: {'met' if met else 'MISSED'}); "
          f"fastest runs: {min(ours) / min(numpy):.2f}x")
    if args.assert_goal and not met:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
