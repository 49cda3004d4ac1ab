"""Studies over registered encoders. :func:`extrapolation`: does it extrapolate? A tiny causal
transformer per encoder, trained on synthetic tasks at length ``L`` and scored at ``L, 2L, 4L,
8L`` (Press et al. 2022; Kazemnejad et al. 2023; Ruoss et al. 2023; Chen et al. 2023). Needs
PyTorch; ``peregistry study extrapolation`` is the command line."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from ._run import QUICK, SCALINGS, ExtrapolationResult, Row, Settings, run
from ._tasks import TASKS

__all__ = ["QUICK", "SCALINGS", "TASKS", "ExtrapolationResult", "Row", "Settings",
           "extrapolation"]


def extrapolation(encoders: Sequence[str] | None = None, *, quick: bool = False,
                  settings: Settings | None = None,
                  progress: TextIO | None = None,
                  threads: int | None = 1) -> ExtrapolationResult:
    """Train a tiny decoder-only transformer (2 layers, width 64, 4 heads) per encoder, task
    (copy, reverse, offset) and seed at length ``L`` and return its accuracy at ``L, 2L, 4L,
    8L``, with RoPE's linear, dynamic-NTK and YaRN scalings applied to the RoPE-trained model
    as extra rows. ``encoders``: names (``"nope"``: no positional encoding); default every
    built-in that fits a causal model, the installed plugins' encoders, and NoPE. ``quick``:
    :data:`QUICK` settings (one seed, L = 8, 60 steps). Seeded: the same call gives the same
    numbers. ``progress``: a stream for the progress and the time left (a bar redrawn in place
    on a terminal, else a line every 10 s). ``threads``: torch's intra-op threads while it runs
    (the models are too small to gain from more than one; restored after; None leaves them)."""
    chosen = settings if settings is not None else (QUICK if quick else Settings())
    return run(encoders, settings=chosen, progress=progress, threads=threads)
