"""``peregistry bench [NAME...]``: each encoder timed against hand-written code and a memory copy
(:mod:`peregistry.bench`)."""

from __future__ import annotations

import argparse
from typing import TextIO

from ._core import Command, UsageError, comma_list, int_at_most

#: The most timed repetitions: each keeps its timings, and 10**4 already takes hours on the
#: large cases.
MAX_REPS = 10_000


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("names", metavar="NAME", nargs="*")
    parser.add_argument("--backend", action="append", default=[], metavar="B",
                        help="numpy, torch, jax or array_api_strict (repeatable, or "
                             "comma-separated)")
    parser.add_argument("--quick", action="store_true",
                        help="small shapes and few repetitions (a smoke test)")
    parser.add_argument("--reps", type=int_at_most(MAX_REPS), metavar="N",
                        help=f"timed repetitions (default 25, --quick 5; at most {MAX_REPS:,})")
    parser.add_argument("--progress", action="store_true",
                        help="draw the progress bar on stderr even when it is not a terminal")


def run(args: argparse.Namespace, extras: list[str], out: TextIO) -> int:
    """``peregistry bench [NAME...] [--backend B] [--quick]``: the table of medians and ratios."""
    from ..bench import format_bench_table, run_bench, stderr_if_tty

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


def kernels_line() -> str:
    """What ran the rotations: each rotation kernel plugin with its status (and, where the
    kernel says, its instruction set and thread count), and torch's intra-op threads."""
    import sys

    from ..rope import kernels

    parts = []
    for k in kernels():
        detail = [k.status]
        for attr in ("isa", "threads"):
            value = getattr(k.kernel, attr, None)
            value = value() if callable(value) else value
            if value is not None:
                detail.append(f"{attr} {value}")
        parts.append(f"{k.name} ({k.plugin.label}: {', '.join(detail)})")
    line = "rotation kernels: " + ("; ".join(parts) if parts else
                                   "none installed (the core's own paths ran)")
    torch = sys.modules.get("torch")
    if torch is not None:
        line += f"; torch threads: {torch.get_num_threads()}"
    return line


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
