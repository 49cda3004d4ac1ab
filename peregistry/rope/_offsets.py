"""The positions ``offset .. offset + seq - 1`` that ``positions=None`` stands for must fit the
integer dtype they are computed in: the check, and what a sequence length is when it is
symbolic (``torch.export``, ``jax.export``, ``torch.compile(dynamic=True)``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from . import _delegation

if TYPE_CHECKING:
    from ..backends._base import Ctx


def concrete_len(n: Any) -> int | None:
    """A sequence length ``n`` if it is a Python int, None if it is symbolic (a torch
    ``SymInt`` under ``torch.export``/``torch.compile(dynamic=True)``, a symbolic dimension of
    ``jax.export``): comparing it with the int64/int32 limits would make ``torch.export`` add a
    guard (a ``Dim`` without ``max`` then violates its constraints) and is inconclusive in JAX."""
    return n if isinstance(n, int) else None


def check_offset_range(name: str, offset: Any, seq: Any, ctx: Ctx, *, tracing: bool) -> None:
    """Positions ``offset .. offset+seq-1`` must fit the integer dtype they are computed in
    (int64; int32 under JAX without x64), or they would wrap silently. A Python int is
    checked always; an integer array when its values can be read now (eagerly, without a
    device synchronization, except under JAX without x64 where int32 is reachable) and its
    dtype could overflow at all (an int32 offset never can in int64). A symbolic ``seq``
    (:func:`concrete_len`) is not checked: only the offset itself, as one position."""
    xp = ctx.xp
    wide = _delegation.wide_int(xp)
    limits = xp.iinfo(wide)
    count = max(concrete_len(seq) or 0, 1)
    if isinstance(offset, int):
        first = last = offset
    elif xp.isdtype(offset.dtype, "integral"):
        own = xp.iinfo(offset.dtype)
        if (own.max + count - 1 <= limits.max and own.min >= limits.min) or tracing:
            return
        if limits.bits == 64 and not _delegation.reads_cheaply(offset, xp=xp):
            return  # beyond 2**63 - seq: not read back from an accelerator (documented)
        size = math.prod(int(n) for n in offset.shape)
        bounds = _delegation.int_bounds(offset, ctx=ctx) if size else None
        if bounds is None:
            return
        first, last = bounds
    else:
        return
    end = last + count - 1
    if first < limits.min or end > limits.max:
        value, reach = (first, first) if first < limits.min else (last, end)
        raise ValueError(
            f"{name}: offset={value} with {seq} positions reaches position "
            f"{reach}, beyond what {str(getattr(wide, '__name__', wide)).rsplit('.', 1)[-1]} "
            f"positions hold ({limits.min} .. {limits.max}); they would wrap. Pass a "
            f"smaller offset (or positions of a real dtype)")
