"""Titles that fit their figure: :mod:`peregistry.plot`'s automatic titles name every option set
away from its default, and a rope scaling's dict alone is wider than the picture. Each title line
is wrapped at its ``", "`` separators (the options' own) by its rendered width, and a sequence of
more than :data:`SHOWN` values is shown by its ends and its length."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["fit_titles", "short_repr"]

#: The most values of a list or tuple a title shows in full (LongRoPE's factors have dim/2).
SHOWN = 6
#: The share of the room either side of a title's centre that it may fill.
MARGIN = 0.97


def short_repr(value: Any) -> str:
    """``repr(value)``, with a list or tuple of more than :data:`SHOWN` items written as its
    first three, ``...``, its last and its length (``[1.0, 1.0, 1.1, ..., 4.0] (64 values)``),
    inside dicts too."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {short_repr(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple) and len(value) > SHOWN:
        ends = ", ".join(short_repr(v) for v in value[:3])
        open_, close = "[]" if isinstance(value, list) else "()"
        return f"{open_}{ends}, ..., {short_repr(value[-1])}{close} ({len(value)} values)"
    if isinstance(value, list | tuple):
        items = ", ".join(short_repr(v) for v in value)
        return f"[{items}]" if isinstance(value, list) else f"({items}{',' * (len(value) == 1)})"
    return repr(value)


def fit_titles(fig: Any) -> None:
    """Wrap the figure's title and its axes' titles until each lies inside the figure, then lay
    the figure out again to make room for the lines (its layout engine, else ``tight_layout``)."""
    renderer = fig.canvas.get_renderer()
    texts = [ax.title for ax in fig.axes]
    if getattr(fig, "_suptitle", None) is not None:
        texts.append(fig._suptitle)
    changed = False
    for text in texts:
        if text.get_text():
            changed |= _fit(text, fig.bbox.x0, fig.bbox.x1, renderer)
    if changed:  # the plots lay out with tight_layout (which leaves a placeholder engine)
        from matplotlib.layout_engine import PlaceHolderLayoutEngine

        engine = fig.get_layout_engine()
        if engine is None or isinstance(engine, PlaceHolderLayoutEngine):
            fig.tight_layout()
        else:
            engine.execute(fig)


def _fit(text: Any, left: float, right: float, renderer: Any) -> bool:
    """Wrap ``text`` (a centred matplotlib Text) so that it fits between ``left`` and ``right``
    (display units); True if it changed."""
    box = text.get_window_extent(renderer)
    if box.x0 >= left and box.x1 <= right:
        return False
    centre = (box.x0 + box.x1) / 2
    room = 2 * min(centre - left, right - centre) * MARGIN

    def width(candidate: str) -> float:
        text.set_text(candidate)
        return float(text.get_window_extent(renderer).width)

    original = text.get_text()
    lines = [out for line in original.split("\n") for out in _wrap(line, room, width)]
    text.set_text("\n".join(lines))
    return True


def _wrap(line: str, room: float, width: Any) -> list[str]:
    """``line`` broken after its ``", "`` separators into lines no wider than ``room`` (a piece
    wider on its own is cut where it must be, between characters)."""
    if width(line) <= room:
        return [line]
    pieces = line.split(", ")
    out: list[str] = []
    current = ""
    for i, piece in enumerate(pieces):
        piece += "," if i < len(pieces) - 1 else ""
        trial = f"{current} {piece}" if current else piece
        if not current or width(trial) <= room:
            current = trial
            continue
        out.append(current)
        current = piece
    out.append(current)
    return [cut for part in out for cut in _cut(part, room, width)]


def _cut(part: str, room: float, width: Any) -> list[str]:
    """``part`` cut between characters into lines no wider than ``room``."""
    out = []
    while width(part) > room and len(part) > 1:
        low, high = 1, len(part)  # the longest prefix that fits: in [low, high)
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (mid, high) if width(part[:mid]) <= room else (low, mid)
        out.append(part[:low])
        part = part[low:]
    out.append(part)
    return out
