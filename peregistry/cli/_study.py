"""``peregistry study extrapolation``: the length-generalization study of
:func:`peregistry.study.extrapolation` (needs PyTorch), as a table, JSON or a plot."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from ..study._settings import QUICK, Settings
from ._core import Command, UsageError, comma_list, int_at_most

#: The most threads ``--threads`` sets (a typo such as 40000 is an error, not a hang).
MAX_THREADS = 1024


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("study", choices=("extrapolation",), help="the study to run")
    parser.add_argument("--encoders", action="append", default=[], metavar="NAME",
                        help="encoders to study (repeatable or comma-separated; 'nope': none); "
                             "default every built-in that fits a causal model, the installed "
                             "plugins' and NoPE")
    parser.add_argument("--quick", action="store_true",
                        help=f"one seed, lengths up to {QUICK.train_length}, {QUICK.steps} "
                             "steps: under a minute on 2 cores with another busy process")
    parser.add_argument("--seeds", type=int_at_most(16), metavar="N",
                        help="seeds 0..N-1 (default 3; --quick 1)")
    parser.add_argument("--steps", type=int_at_most(100_000), metavar="N",
                        help=f"training steps per model (default {Settings().steps}; --quick "
                             f"{QUICK.steps})")
    parser.add_argument("--tasks", action="append", default=[], metavar="TASK",
                        help="tasks (repeatable or comma-separated) out of copy, reverse, "
                             "addition, offset; default copy, reverse, addition")
    parser.add_argument("--randomized", action="store_true",
                        help="train on sorted random positions up to 8L (Ruoss et al. 2023)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--plot", metavar="FILE.png", help="draw accuracy against length")
    parser.add_argument("--threads", type=int_at_most(MAX_THREADS), metavar="N",
                        help="models trained side by side, each in a process of its own on one "
                             "thread (default: one per CPU this process may use; 1: one after "
                             "another in this process). The numbers do not depend on it")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="progress on stderr: --progress draws a bar redrawn in place, "
                             "--no-progress none; default: the bar on a terminal, else a line "
                             "every 10 s with the time left")


def run(args: argparse.Namespace, extras: list[str], out: TextIO) -> int:
    """Run the study and print its table (or JSON); ``--plot`` also draws it."""
    import dataclasses
    import importlib.util
    import sys

    if importlib.util.find_spec("torch") is None:
        raise UsageError("peregistry study needs PyTorch: pip install 'peregistry[torch]'")
    from .. import study  # read at the call: a test may replace study.QUICK
    from ..bench._threads import load_text, threads, usable_cpus
    from ..study._run import run as run_study
    from ._bench import progress_stream

    settings = study.QUICK if args.quick else study.Settings()
    if args.seeds is not None:
        if args.seeds < 1:
            raise UsageError(f"--seeds must be at least 1, got {args.seeds}")
        settings = dataclasses.replace(settings, seeds=tuple(range(args.seeds)))
    if args.steps is not None:
        if args.steps < 1:
            raise UsageError(f"--steps must be at least 1, got {args.steps}")
        settings = dataclasses.replace(settings, steps=args.steps)
    if args.randomized:
        settings = dataclasses.replace(settings, randomized=True)
    if args.tasks:
        try:
            settings = dataclasses.replace(settings, tasks=tuple(comma_list(args.tasks)))
        except ValueError as exc:
            raise UsageError(f"--tasks: {exc}") from None
    if args.plot:
        _check_plot_path(args.plot)  # before training: a bad path must not cost the results
    side = args.threads if args.threads is not None else usable_cpus()
    with threads(1, torch=True, jax=False) as said:
        how = (f"{side} models side by side in processes, one thread each" if side > 1
               else "1 model at a time in this process")
        print(f"study: threads {'; '.join(said)}; {how}; {load_text()}", file=sys.stderr,
              flush=True)
        result = run_study(comma_list(args.encoders) or None, settings=settings,
                           progress=progress_stream(args.progress), redraw=args.progress,
                           threads=side)
    out.write(json.dumps(result.as_dict(), indent=1) + "\n" if args.format == "json"
              else result.table())
    out.flush()
    if args.plot:
        from ..study.plot import plot_extrapolation

        plot_extrapolation(result, args.plot)
    return 0


def _check_plot_path(path: str) -> None:
    """``--plot FILE.png`` can be written: matplotlib is installed, the directory exists and is
    writable, and the path is not a directory (:class:`UsageError` otherwise)."""
    import os
    from pathlib import Path

    target = Path(path)
    folder = target.parent
    if target.is_dir():
        raise UsageError(f"--plot {path!r} is a directory; give a file name such as "
                         f"{str(target / 'extrapolation.png')!r}")
    if not folder.is_dir():
        raise UsageError(f"--plot {path!r}: directory {str(folder)!r} does not exist; create it "
                         f"or give a path in an existing directory")
    if not os.access(folder, os.W_OK):
        raise UsageError(f"--plot {path!r}: directory {str(folder)!r} is not writable")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'peregistry[docs]'") from None


COMMAND = Command(
    name="study",
    help="train tiny models per encoder and test them beyond their training length",
    description="extrapolation: a tiny causal transformer (2 layers, width 64, 4 heads) per "
                "encoder, task (copy, reverse, offset retrieval) and seed, trained at length L "
                "and scored at L, 2L, 4L, 8L; RoPE's linear, dynamic-NTK and YaRN scalings on "
                "the RoPE-trained model as extra rows. Seeded: the same command gives the same "
                "numbers.",
    add_arguments=_add_arguments,
    run=run,
    epilog="peregistry study extrapolation --quick --encoders rotary,alibi,nope",
)
