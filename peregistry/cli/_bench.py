"""``peregistry bench [NAME...]``: each encoder timed against hand-written code and a memory copy
(:mod:`peregistry.bench`)."""

from __future__ import annotations

import argparse
from typing import TextIO

from ._core import Command, UsageError, comma_list, int_at_most

#: The most timed repetitions: each keeps its timings, and 10**4 already takes hours on the
#: large cases.
MAX_REPS = 10_000
#: The most threads ``--threads`` sets (a typo such as 40000 is an error, not a hang).
MAX_THREADS = 1024


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", metavar="NAME", nargs="*")
    parser.add_argument("--backend", action="append", default=[], metavar="B",
                        help="numpy, torch, jax or array_api_strict (repeatable, or "
                             "comma-separated)")
    parser.add_argument("--quick", action="store_true",
                        help="small shapes and few repetitions (a smoke test)")
    parser.add_argument("--reps", type=int_at_most(MAX_REPS), metavar="N",
                        help=f"timed repetitions (default 25, --quick 5; at most {MAX_REPS:,})")
    parser.add_argument("--threads", type=int_at_most(MAX_THREADS), metavar="N",
                        help="threads for every timed call, ours, hand-written and copy alike: "
                             "torch.set_num_threads(N) and OMP_NUM_THREADS=N (which rotation "
                             "kernels follow); default: as the process starts")
    parser.add_argument("--progress", action="store_true",
                        help="draw the progress bar on stderr even when it is not a terminal")


def run(args: argparse.Namespace, extras: list[str], out: TextIO) -> int:
    """``peregistry bench [NAME...] [--backend B] [--quick]``: the table of medians and ratios."""
    from ..bench import format_bench_table, run_bench, stderr_if_tty

    if args.threads is not None:
        set_threads(args.threads)
    try:
        rows = run_bench(args.names or None, comma_list(args.backend) or None, quick=args.quick,
                         reps=args.reps, progress=stderr_if_tty(args.progress))
    except ImportError as exc:
        raise UsageError(str(exc)) from None
    out.write(format_bench_table(rows) + "\n")
    out.write("ours / hand-written and ours / copy are ratios of medians measured interleaved "
              "in this run (lower is faster).\n")
    out.write(kernels_line() + "\n")
    return 0


def set_threads(n: int) -> None:
    """Run every timed call on ``n`` threads, on purpose: a ratio compares two calls only if both
    had the same cores. ``OMP_NUM_THREADS`` is read by torch when it is imported and by rotation
    kernels at each call (the C kernel's NumPy path); a torch already imported is told directly."""
    import os
    import sys

    os.environ["OMP_NUM_THREADS"] = str(n)
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)


def kernels_line() -> str:
    """What ran the rotations: each rotation kernel plugin with its status (and, where the
    kernel says, its instruction set and thread count), then :func:`threads_line`."""
    from ..rope import kernels

    parts = []
    for k in kernels():
        detail = [k.status]
        for attr in ("isa", "threads"):
            try:  # a plugin's code: what it cannot say is not printed, the bench goes on
                value = getattr(k.kernel, attr, None)
                value = value() if callable(value) else value
            except Exception as exc:
                value = f"unknown ({type(exc).__name__})"
            if value is not None:
                detail.append(f"{attr} {value}")
        parts.append(f"{k.name} ({k.plugin.label}: {', '.join(detail)})")
    line = "rotation kernels: " + ("; ".join(parts) if parts else
                                   "none installed (the core's own paths ran)")
    return line + "\n" + threads_line()


def threads_line() -> str:
    """How many threads the timed calls ran on, framework by framework: the same for ours, the
    hand-written code and the copy, except where a kernel says otherwise."""
    import os
    import sys

    parts = []
    torch = sys.modules.get("torch")
    if torch is not None:
        parts.append(f"torch {torch.get_num_threads()} (ours, hand-written and clone alike)")
    if "numpy" in sys.modules:
        parts.append("NumPy 1 (its own functions: the core's rotation, the hand-written code and "
                     "the copy; a rotation kernel's own count is in its line above)")
    if "jax" in sys.modules:
        parts.append("JAX: XLA's own CPU pool (ours, hand-written and copy alike)")
    env = os.environ.get("OMP_NUM_THREADS")
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    tail = f"; OMP_NUM_THREADS={env}" if env else "; OMP_NUM_THREADS unset"
    tail += f"; {os.cpu_count()} CPUs" + (f", load average {load:.2f}" if load is not None else "")
    return "threads: " + ("; ".join(parts) if parts else "no framework imported") + tail


COMMAND = Command(
    name="bench",
    help="time encoders against hand-written code and a memory copy",
    description="For each NAME (default: every benchmarked encoder) and --backend (default: "
                "every installed one of numpy, torch, jax, array_api_strict), time the encoder, "
                "a plain hand-written implementation in the same framework and a copy of the "
                "output's bytes, interleaved in one run; print medians and ratios.",
    add_arguments=_add_arguments,
    run=run,
)
