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
    parser.add_argument("--threads", type=int_at_most(MAX_THREADS), metavar="N", default=1,
                        help="threads for every timed call, ours, hand-written and copy alike: "
                             "torch.set_num_threads(N), OMP_NUM_THREADS=N (which BLAS and "
                             "rotation kernels follow), XLA's single-thread flags for N=1 "
                             "(default 1: on a loaded machine more threads time the machine's "
                             "other work, not the code)")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress on stderr: --progress draws a bar redrawn in place, "
                             "--no-progress none; default: the bar on a terminal, else a line "
                             "every 10 s with the time left")


def run(args: argparse.Namespace, extras: list[str], out: TextIO) -> int:
    """``peregistry bench [NAME...] [--backend B] [--quick]``: the table of medians and ratios,
    timed on ``--threads`` threads (said on stderr at the start and below the table)."""
    import sys

    from ..bench import format_bench_table, installed_frameworks, run_bench
    from ..bench._threads import load_average, load_text, threads

    backends = comma_list(args.backend) or None
    timed = backends or installed_frameworks()
    with threads(args.threads, torch="torch" in timed, jax="jax" in timed) as said:
        start_load = load_average()
        print(f"bench: threads {'; '.join(said)}; {load_text()}", file=sys.stderr, flush=True)
        try:
            rows = run_bench(args.names or None, backends, quick=args.quick, reps=args.reps,
                             progress=progress_stream(args.progress), redraw=args.progress)
        except ImportError as exc:
            raise UsageError(str(exc)) from None
        out.write(format_bench_table(rows) + "\n")
        out.write("ours / hand-written and ours / copy are ratios of medians measured interleaved "
                  "in this run (lower is faster).\n")
        out.write(kernels_line(start_load) + "\n")
    return 0


def progress_stream(flag: bool | None) -> TextIO | None:
    """``sys.stderr``, or None for ``--no-progress`` (``--progress`` also sets ``redraw``)."""
    import sys

    return None if flag is False else sys.stderr


def kernels_line(start_load: float | None = None) -> str:
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
    return line + "\n" + threads_line(start_load)


def threads_line(start_load: float | None = None) -> str:
    """How many threads the timed calls ran on, framework by framework: the same for ours, the
    hand-written code and the copy, except where a kernel says otherwise; then the CPUs and the
    load average (at the start, ``start_load``, and now)."""
    import os
    import sys

    from ..bench._threads import load_text

    parts = []
    torch = sys.modules.get("torch")
    if torch is not None:
        parts.append(f"torch {torch.get_num_threads()}, inter-op "
                     f"{torch.get_num_interop_threads()} (ours, hand-written and clone alike)")
    if "numpy" in sys.modules:
        parts.append("NumPy 1 (its own functions: the core's rotation, the hand-written code and "
                     "the copy; a rotation kernel's own count is in its line above)")
    if "jax" in sys.modules:
        one = "xla_cpu_multi_thread_eigen=false" in os.environ.get("XLA_FLAGS", "")
        parts.append(("JAX 1 (XLA_FLAGS)" if one else "JAX: XLA's own CPU pool")
                     + " (ours, hand-written and copy alike)")
    env = os.environ.get("OMP_NUM_THREADS")
    tail = f"; OMP_NUM_THREADS={env}" if env else "; OMP_NUM_THREADS unset"
    return ("threads: " + ("; ".join(parts) if parts else "no framework imported") + tail
            + "; " + load_text(start_load))


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
