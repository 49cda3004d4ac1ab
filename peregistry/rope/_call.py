"""What a rotary call knows once its arguments are checked (:meth:`RotaryEncoder._rotate_call`
makes it): :class:`Call` (namespace, device, dtypes, ``x``'s shape, ``offset`` or
``positions``, the dtype to rotate in), and what the options say of the rotation,
:class:`Rotation`."""

from __future__ import annotations

from typing import Any, NamedTuple

from ..backends._base import Ctx

__all__ = ["Call", "Rotation"]


class Rotation(NamedTuple):
    """What the options of a rotary encoder say about its rotation (made at construction)."""

    head_dim: int
    rotary_dim: int
    interleaved: bool
    last: bool  # the last rotary_dim features rotate (else the first)


class Call(NamedTuple):
    """One validated :meth:`RotaryEncoder.rotate` call."""

    ctx: Ctx
    x: Any
    positions: Any  # validated positions, or None for ``offset + arange(seq)``
    offset: Any  # a Python int or an array
    seq_len: int | None
    tracing: bool
    cdt: Any  # the dtype the rotation runs in
