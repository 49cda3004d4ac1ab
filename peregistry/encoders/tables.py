"""Helpers of learned position tables: range checks of the indices, NaN rows for out-of-range
positions under a tracer, and linear resizing of a table (``torch.nn.functional.interpolate``
conventions), all with Array API calls on ``ctx.xp``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import peregistry.rope._delegation as _delegation

from .pairs import index_dtype

if TYPE_CHECKING:
    from ..backends._base import Ctx

__all__ = ["check_index_range", "linear_resize", "linear_resize_plan", "nan_where"]


def check_index_range(owner: str, idx: Any, n: int, *, what: str, option: str,
                      ctx: Ctx) -> tuple[Any, Any | None]:
    """Validate integer indices against ``[0, n)``.

    Returns ``(safe_idx, invalid)``: in eager mode ``invalid`` is None and a position outside the
    range is a ``ValueError`` naming the range and the offending values. While tracing
    (``jax.jit``, ``torch.compile``: values unknown on the host) ``safe_idx`` has the bad entries
    replaced by 0 and ``invalid`` is the boolean mask the caller turns into NaN rows
    (:func:`nan_where`), so out-of-range positions are never silently clamped or wrapped.
    """
    xp = ctx.xp
    if not ctx.backend.is_tracing(idx):
        # (short arrays read as a list; None where an enclosing JAX trace stages the reading)
        bounds = _delegation.int_bounds(idx, ctx=ctx) if math.prod(idx.shape) else (0, 0)
        if bounds is not None:
            lo, hi = bounds
            if lo < 0 or hi >= n:
                raise ValueError(
                    f"{owner}: {what} must be in [0, {n}) ({option}={n}), got values from {lo} "
                    f"to {hi}; resize the table (enc.resize) for longer inputs"
                )
            return idx, None
    invalid = (idx < 0) | (idx >= n)
    return xp.where(invalid, xp.zeros_like(idx), idx), invalid


def nan_where(invalid: Any | None, out: Any, *, ctx: Ctx) -> Any:
    """``out`` with the rows (last axis) of ``invalid`` positions set to NaN."""
    if invalid is None:
        return out
    xp = ctx.xp
    nan = xp.asarray(math.nan, dtype=out.dtype, device=ctx.device)
    return xp.where(xp.expand_dims(invalid, axis=-1), nan, out)


def linear_resize_plan(n_in: int, n_out: int, *,
                       align_corners: bool) -> tuple[list[int], list[int], list[float]]:
    """Source indices and weights of 1-D linear interpolation from ``n_in`` to ``n_out`` samples,
    with the conventions of ``torch.nn.functional.interpolate(mode="linear")``:
    ``align_corners=False`` maps output ``i`` to ``src = (i + 0.5)·n_in/n_out - 0.5`` (clamped
    at 0), ``align_corners=True`` to ``src = i·(n_in - 1)/(n_out - 1)``. Returns ``(i0, i1, w)``
    with ``out[i] = (1 - w)·t[i0] + w·t[i1]``."""
    i0, i1, w = [], [], []
    for i in range(n_out):
        if align_corners:
            src = i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        else:
            src = max((i + 0.5) * (n_in / n_out) - 0.5, 0.0)
        a = min(math.floor(src), n_in - 1)
        i0.append(a)
        i1.append(min(a + 1, n_in - 1))
        w.append(src - a)
    return i0, i1, w


def linear_resize(table: Any, n_out: int, *, align_corners: bool, ctx: Ctx) -> Any:
    """Rows of a ``(n, c)`` table linearly interpolated to ``(n_out, c)``, computed in
    ``ctx.wide`` and returned in the table's dtype (differentiable: two gathers and a blend)."""
    xp = ctx.xp
    i0, i1, w = linear_resize_plan(int(table.shape[0]), n_out, align_corners=align_corners)
    t = xp.astype(table, ctx.wide) if table.dtype != ctx.wide else table
    idt = index_dtype(ctx)
    a = xp.take(t, ctx.constant(i0, idt), axis=0)
    b = xp.take(t, ctx.constant(i1, idt), axis=0)
    wt = xp.expand_dims(ctx.constant(w), axis=-1)
    out = a * (1.0 - wt) + b * wt
    return out if out.dtype == table.dtype else xp.astype(out, table.dtype)
