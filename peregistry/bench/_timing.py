"""Timing: the interleaved medians, the run over encoders and backends, and the table that
``peregistry bench`` prints."""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO

from ._cases import BENCHMARKS, Bench, BenchSkipped
from ._progress import Progress

if TYPE_CHECKING:
    from ..backends._base import Backend

__all__ = ["FRAMEWORKS", "BenchRow", "Progress", "format_bench_table", "installed_frameworks",
           "run_bench", "stderr_if_tty", "time_interleaved"]

#: The backends ``bench`` times by default, by ``--backend`` name.
FRAMEWORKS = ("numpy", "torch", "jax", "array_api_strict")


def _adapter(name: str) -> Backend:
    from ..registry import default_registry

    return default_registry.backend(name)


def installed_frameworks() -> list[str]:
    """The backends of :data:`FRAMEWORKS` that are installed."""
    return [n for n in FRAMEWORKS if _adapter(n).is_installed()]


@dataclass(frozen=True)
class BenchRow:
    """One line of the table: medians in seconds and the two ratios."""

    encoder: str
    backend: str
    shape: str
    ours: float
    hand: float
    copy: float
    #: why the pair was not timed (the medians are then NaN), or "".
    skipped: str = ""

    @property
    def vs_hand(self) -> float:
        return self.ours / self.hand

    @property
    def vs_copy(self) -> float:
        return self.ours / self.copy


def time_interleaved(fns: Sequence[Callable[[], Any]], reps: int, *, warmup: int = 2,
                     tick: Callable[[], None] | None = None) -> list[float]:
    """Median seconds of each of ``fns``, timed in ``reps`` interleaved rounds (the order
    rotates each round so no function always runs first)."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for r in range(reps):
        for j in range(len(fns)):
            i = (j + r) % len(fns)
            t0 = time.perf_counter()
            fns[i]()
            times[i].append(time.perf_counter() - t0)
        if tick is not None:
            tick()
    return [statistics.median(t) for t in times]


def _validated(names: Sequence[str] | None,
               backends: Sequence[str] | None) -> tuple[list[str], list[str]]:
    names = list(dict.fromkeys(names or BENCHMARKS))
    for n in names:
        if n not in BENCHMARKS:
            raise ValueError(f"no benchmark for encoder {n!r}; benchmarked: {', '.join(BENCHMARKS)}")
    backends = list(dict.fromkeys(backends or installed_frameworks()))
    for b in backends:
        if b not in FRAMEWORKS:
            raise ValueError(f"bench backend must be one of {', '.join(FRAMEWORKS)}, got {b!r}")
        if not _adapter(b).is_installed():
            raise ImportError(f"bench backend {b!r} is not installed")
    return names, backends


def run_bench(names: Sequence[str] | None = None, backends: Sequence[str] | None = None, *,
              quick: bool = False, reps: int | None = None,
              progress: TextIO | None = None, redraw: bool | None = None) -> list[BenchRow]:
    """Time each encoder of ``names`` (default: all of :data:`BENCHMARKS`) on each backend
    of ``backends`` (default: the installed ones); the :class:`Progress` with the time left goes
    to ``progress`` (``redraw``: a bar redrawn in place; default when it is a terminal).

    :raises ValueError: for an encoder without a benchmark or an unknown backend.
    :raises ImportError: for a backend that is not installed.
    """
    names, backends = _validated(names, backends)
    reps = reps or (5 if quick else 25)
    bar = Progress(len(names) * len(backends) * reps, progress, redraw=redraw)
    rows = []
    for b in backends:
        bench = Bench(_adapter(b))
        for n in names:
            bar.step(f"{n} on {b}")
            try:
                case = BENCHMARKS[n](bench, quick)
            except BenchSkipped as exc:
                nan = math.nan
                rows.append(BenchRow(n, b, "-", nan, nan, nan, skipped=str(exc)))
                for _ in range(reps):
                    bar.step()
                continue
            ours, hand, copy = time_interleaved((case.ours, case.hand, case.copy), reps,
                                                tick=bar.step)
            rows.append(BenchRow(n, b, case.shape, ours, hand, copy))
    bar.close()
    return rows


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if seconds < 1 else f"{seconds:.2f} s"


def format_bench_table(rows: Sequence[BenchRow]) -> str:
    """The rows as an aligned text table: medians and ratios (``x`` = times as long)."""
    header = ("encoder", "backend", "shape", "ours", "hand-written", "copy", "vs hand", "vs copy")
    notes: dict[str, list[str]] = {}  # reason → the pairs skipped for it (numbered in order)
    body = []
    for r in rows:
        if r.skipped:
            pairs = notes.setdefault(r.skipped, [])
            pairs.append(f"{r.encoder} on {r.backend}")
            number = list(notes).index(r.skipped) + 1
            body.append((r.encoder, r.backend, r.shape, f"skipped [{number}]", "-", "-", "-", "-"))
            continue
        body.append((r.encoder, r.backend, r.shape, _ms(r.ours), _ms(r.hand), _ms(r.copy),
                     f"{r.vs_hand:.2f}x", f"{r.vs_copy:.2f}x" if math.isfinite(r.vs_copy) else "-"))
    widths = [max(len(h), *(len(row[i]) for row in body)) if body else len(h)
              for i, h in enumerate(header)]
    right = {3, 4, 5, 6, 7}

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.rjust(w) if i in right else c.ljust(w)
                         for i, (c, w) in enumerate(zip(cells, widths, strict=True))).rstrip()

    lines = [line(header), line(["-" * w for w in widths]), *(line(r) for r in body)]
    if notes:
        lines += ["", "notes:", *(f"[{i}] skipped {', '.join(pairs)}: {reason}"
                                 for i, (reason, pairs) in enumerate(notes.items(), 1))]
    return "\n".join(lines)


def stderr_if_tty(force: bool) -> TextIO | None:
    """``sys.stderr`` when it is a terminal (or ``force``), else None (no progress bar).
    (The commands now give :class:`Progress` the stream whatever it is: off a terminal it writes
    lines.)"""
    return sys.stderr if force or sys.stderr.isatty() else None
