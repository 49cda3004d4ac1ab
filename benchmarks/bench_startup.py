"""Startup cost of peregistry, measured against ``import numpy`` in the same run.

Each repetition starts two fresh interpreters, interleaved (so drift of the machine affects both
alike):

* ``python -c "import peregistry; peregistry.get_encoder('rotary', dim=64)"``
* ``python -c "import numpy"``

(with ``--python`` given several times, the snippets of every interpreter, all interleaved) and
the script prints the median wall time of each, their ratio, and the goal of issue 44 (ratio
<= 1.5; issue 29 asked 1.6),
and the ratio of the fastest runs (on a shared machine the least disturbed). With ``--assert-goal``
it exits 1 when the median ratio misses the goal. Run it with the interpreter of the environment to
measure::

    python benchmarks/bench_startup.py --repeat 20 --assert-goal
    python benchmarks/bench_startup.py --python before/bin/python --python after/bin/python

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

GOAL = 1.5
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


def measure(pythons: Sequence[str], repeat: int,
            warmup: int) -> dict[tuple[str, str], list[float]]:
    """Wall times of the peregistry and the numpy snippet under each interpreter, ``repeat``
    each, every round running all of them in a rotating order."""
    jobs = [(python, snippet) for python in pythons
            for snippet in (PEREGISTRY_SNIPPET, NUMPY_SNIPPET)]
    for _ in range(warmup):  # fill the OS file cache and write bytecode caches; not counted
        for job in jobs:
            wall_time(*job)
    times: dict[tuple[str, str], list[float]] = {job: [] for job in jobs}
    for i in range(repeat):
        # Rotate which goes first, so that none always runs on a "warmer" machine.
        for job in jobs[i % len(jobs):] + jobs[:i % len(jobs)]:
            times[job].append(wall_time(*job))
    return times


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; return 1 if ``--assert-goal`` is given and the goal is missed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=20,
                        help="runs of each snippet (default 20)")
    parser.add_argument("--warmup", type=int, default=2,
                        help="uncounted runs of each snippet first (default 2)")
    parser.add_argument("--python", action="append",
                        help="interpreter to measure (default: this one); give it several times "
                             "to compare environments (e.g. before and after a change) in one run")
    parser.add_argument("--assert-goal", action="store_true",
                        help=f"exit 1 if a median ratio is above {GOAL}")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    pythons = args.python or [sys.executable]

    times = measure(pythons, args.repeat, args.warmup)
    print(f"{args.repeat} rounds, each running every snippet once in a rotating order "
          f"({args.warmup} warm-up rounds)")
    all_met = True
    for python in pythons:
        ours, numpy = times[python, PEREGISTRY_SNIPPET], times[python, NUMPY_SNIPPET]
        ratio = statistics.median(ours) / statistics.median(numpy)
        met = ratio <= GOAL
        all_met = all_met and met
        print(f"python: {python}")
        for snippet, t in ((PEREGISTRY_SNIPPET, ours), (NUMPY_SNIPPET, numpy)):
            print(f"  {snippet:<66} median {statistics.median(t) * 1e3:7.1f} ms  "
                  f"(min {min(t) * 1e3:.1f}, max {max(t) * 1e3:.1f})")
        print(f"  ratio: {ratio:.2f}x  (goal <= {GOAL}x: {'met' if met else 'MISSED'}); "
              f"fastest runs: {min(ours) / min(numpy):.2f}x")
    if args.assert_goal and not all_met:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
