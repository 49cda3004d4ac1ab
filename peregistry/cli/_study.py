"""``peregistry study extrapolation``: the length-generalization study of
:func:`peregistry.study.extrapolation` (needs PyTorch), as a table, JSON or a plot."""

from __future__ import annotations

import argparse
import json
from typing import TextIO

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
                        help="one seed, length 8, 60 steps: about 45 s of one CPU core (under "
                             "a minute with a core free; minutes on a busier machine, the "
                             "progress says how many)")
    parser.add_argument("--seeds", type=int_at_most(16), metavar="N",
                        help="seeds 0..N-1 (default 2; --quick 1)")
    parser.add_argument("--steps", type=int_at_most(100_000), metavar="N",
                        help="training steps per model (default 300; --quick 60)")
    parser.add_argument("--randomized", action="store_true",
                        help="train on sorted random positions up to 8L (Ruoss et al. 2023)")
    parser.add_argument("--format", choices=("table", "json"), default="table")
    parser.add_argument("--plot", metavar="FILE.png", help="draw accuracy against length")
    parser.add_argument("--threads", type=int_at_most(MAX_THREADS), metavar="N", default=1,
                        help="torch threads (and OMP_NUM_THREADS) while training (default 1: "
                             "the models are too small to gain from more)")
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
    from ..bench._threads import load_text, threads
    from ..study import QUICK, Settings
    from ..study._run import run as run_study
    from ._bench import progress_stream

    settings = QUICK if args.quick else Settings()
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
    if args.plot:
        _check_plot_path(args.plot)  # before training: a bad path must not cost the results
    with threads(args.threads, torch=True, jax=False) as said:
        print(f"study: threads {'; '.join(said)}; {load_text()}", file=sys.stderr, flush=True)
        result = run_study(comma_list(args.encoders) or None, settings=settings,
                           progress=progress_stream(args.progress), redraw=args.progress,
                           threads=None)
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
