"""Progress of long work (``peregistry bench``, ``peregistry study``) with its elapsed time and an
estimate of the time left: redrawn in place on a terminal, one line at a time elsewhere (a pipe,
a CI log), so that a run that is piped still says what it is doing."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TextIO

__all__ = ["Progress", "format_duration"]


def format_duration(seconds: float) -> str:
    """``"42 s"``, ``"3 min 05 s"`` or ``"1 h 02 min"``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


class Progress:
    """Progress of ``total`` steps on ``stream`` (nothing when ``stream`` is None).

    ``step(label)`` starts a step named ``label``; ``step()`` ends one. The estimate of the time
    left is the mean time of the steps done so far (the first left out) times the steps left.

    :param redraw: draw a bar redrawn in place with ``\\r`` (``[#####.....] 5/10 what, ...``);
        default: when ``stream`` is a terminal. Otherwise a line is written at the first step,
        whenever ``every`` seconds have passed since the last line, and at the end
        (:meth:`close`).
    :param clock: the clock in seconds (tests pass their own).
    """

    def __init__(self, total: int, stream: TextIO | None, width: int = 30, *,
                 redraw: bool | None = None, every: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.total, self.stream, self.width, self.done, self.label = total, stream, width, 0, ""
        self.redraw = redraw if redraw is not None else _is_terminal(stream)
        self.every, self.clock = every, clock
        self.start = clock()
        self._last_line: float | None = None  # when the last line was written (lines mode)
        self._drawn = 0  # width of the bar drawn last (redraw mode)
        self._ended = False  # the last call ended a step (lines mode)
        self._first_done: float | None = None  # when the first step ended

    def timing(self) -> str:
        """``"12 s elapsed, about 30 s left"`` (no estimate before the first step is done; from
        the second on, the first step is left out of the mean: it pays the imports, the warm-up)."""
        now = self.clock()
        elapsed = now - self.start
        text = f"{format_duration(elapsed)} elapsed"
        if 0 < self.done < self.total:
            first = self._first_done
            mean = (now - first) / (self.done - 1) if self.done > 1 and first is not None \
                else elapsed / self.done
            text += f", about {format_duration(mean * (self.total - self.done))} left"
        return text

    def step(self, label: str | None = None) -> None:
        """Start a step named ``label``, or (without one) end the current step."""
        if label is not None:
            self.label = label
        else:
            self.done += 1
            if self.done == 1:
                self._first_done = self.clock()
        if self.stream is None:
            return
        if self.redraw:
            filled = self.width * self.done // max(self.total, 1)
            text = (f"[{'#' * filled}{'.' * (self.width - filled)}] {self.done}/{self.total} "
                    f"{self.label:<24} {self.timing()}")
            self.stream.write("\r" + text.ljust(self._drawn))
            self._drawn = len(text)
        else:
            now = self.clock()
            ended, self._ended = self._ended, label is None
            if (self.done == self.total  # the end is close()'s line
                    or (self._last_line is not None and now - self._last_line < self.every)
                    or (label is None and not ended)):  # a step's end: its label is done;
                return  # the next step's start (or the next repetition's end) says it
            self._last_line = now
            self.stream.write(f"[{self.done}/{self.total}] {self.label}; {self.timing()}\n")
        self.stream.flush()

    def close(self) -> None:
        """Clear the bar (redraw mode) or write the total time (lines mode)."""
        if self.stream is None:
            return
        if self.redraw:
            self.stream.write("\r" + " " * self._drawn + "\r")
        else:
            self.stream.write(f"done: {self.done} of {self.total} in "
                              f"{format_duration(self.clock() - self.start)}\n")
        self.stream.flush()


def _is_terminal(stream: TextIO | None) -> bool:
    try:
        return stream is not None and stream.isatty()
    except (AttributeError, ValueError):  # a stream without isatty, or closed
        return False
