"""Studies over registered encoders. :func:`extrapolation`: does it extrapolate? A tiny causal
transformer per encoder, task and seed, trained on synthetic tasks at lengths up to ``L`` and
scored at ``L, 2L, 4L, 8L``, each cell a mean over seeds with its 95% interval, ranked at
``2L`` among the rows that learned the task (Kazemnejad et al. 2023's setup; Zhou et al. 2024;
Press et al. 2022; Ruoss et al. 2023; Chen et al. 2023). Needs PyTorch; ``peregistry study
extrapolation`` is the command line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from ._result import ExtrapolationResult, Row
from ._run import run
from ._settings import LEARNED, QUICK, Settings
from ._tasks import DEFAULT_TASKS, TASKS
from ._train import SCALINGS

__all__ = ["DEFAULT_TASKS", "LEARNED", "QUICK", "SCALINGS", "TASKS", "ExtrapolationResult", "Row",
           "Settings", "extrapolation"]


def extrapolation(encoders: Sequence[str] | None = None, *, quick: bool = False,
                  settings: Settings | None = None,
                  progress: TextIO | None = None,
                  threads: int | None = 1) -> ExtrapolationResult:
    """Train a tiny decoder-only transformer per encoder, task and seed at lengths up to ``L``
    and return its accuracy at ``L, 2L, 4L, 8L`` (:class:`Settings`: by default ``L = 20``,
    copy, reverse and addition, 3 seeds), with RoPE's linear, dynamic-NTK and YaRN scalings
    applied to the RoPE-trained model as extra rows. ``encoders``: names (``"nope"``: no
    positional encoding); default every built-in that fits a causal model, the installed
    plugins' encoders, and NoPE. ``quick``: :data:`QUICK` settings. Seeded: the same call gives
    the same numbers. ``progress``: a stream for the progress and the time left (a bar redrawn
    in place on a terminal, else a line every 10 s). ``threads``: the models trained side by
    side, each in a process of its own on one thread (1, the default: one after another in
    this process, on one torch thread, restored after; None: in this process on torch's
    threads as they are); the numbers are the same bits whatever it is."""
    chosen = settings if settings is not None else (QUICK if quick else Settings())
    return run(encoders, settings=chosen, progress=progress, threads=threads)
