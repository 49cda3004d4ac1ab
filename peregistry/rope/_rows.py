"""Position ids read as rows of the position table (:mod:`._table_cache`): a decode step's one
position (a slice), integer ids (one gather), and one multi-axis token (its row if every axis is
at one position, a text token; else each pair's entry of its axis's row, an image token). Each
row is what computing that position gives (the angles are elementwise), so results equal a
fresh computation; the callers fall back to computing where these return None.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .. import _lazy
from ._funcs import broadcasts_into
from ._table_cache import SHARED, Tables, device_key, kept_rows, position_table, table_rows

if TYPE_CHECKING:
    from ..encoders.base import Ctx
    from . import _delegation
    from .encoder import RotaryEncoder
else:  # imported by the first call that needs it (peregistry/_lazy.py)
    _delegation = _lazy.delegation(globals())

__all__ = ["cos_sin_rows", "gather_rows", "one_row", "token_row"]

#: The multi-axis tokens whose table entries an encoder keeps, over all devices and dtypes (a
#: few KiB).
ENTRIES_KEPT = 256


def one_row(enc: RotaryEncoder, pos: Any, *, ctx: Ctx, cdt: Any) -> Tables | None:
    """The position table's row ``(1, half)`` for the positions of one token, eager, integer and
    read cheaply (a decode step's ids; the caller knows): it broadcasts wherever ``pos`` does.
    Position ids: the row at their one value. Multi-axis ids (``token_ids``): the row at ``p``
    if every axis is at ``p`` (a text token), else each pair's entry of the row of its axis's
    position (an image token, :func:`_token_entries`). None otherwise, if a position is out of
    the table's reach, or if an enclosing trace stages reading it."""
    if not _delegation.rows_pay_off(ctx.xp):
        return None
    if type(enc)._table_use.position_ids:
        p = _delegation.read_one(pos, ctx=ctx)
    else:
        axes = _delegation.read_ints(pos, ctx=ctx) if type(enc)._table_use.token_ids else None
        if axes and min(axes) != max(axes):
            return _token_entries(enc, axes, ctx=ctx, cdt=cdt)
        p = axes[0] if axes else None
    if p is None or p < 0:
        return None
    return table_rows(enc, p, 1, ctx=ctx, cdt=cdt, eager=True)  # not staged: nor are slices


def _token_entries(enc: RotaryEncoder, axes: list[int], *, ctx: Ctx,
                   cdt: Any) -> Tables | None:
    """One token at positions ``axes`` (one per axis): column ``i`` of its tables is entry
    ``(axes[a_i], i)`` of the position table, ``a_i`` the axis pair ``i`` turns with (the
    table's rows are every axis at one position, and the angles are elementwise: the same
    bits as computing). One gather of ``(1, width)`` per table, kept per position tuple, dtype
    and device while the shared cache keeps its tables (its generation; nothing is kept with
    the tables turned off, a budget of 0); None where the encoder does not say which axis each
    column follows, or a position is out of the table's reach."""
    cache = enc._table_cache
    if cache.columns is None:
        cache.columns = (enc._column_axes(),)
    columns = cache.columns[0]
    if columns is None or min(axes) < 0:
        return None
    key = (device_key(ctx.device), cdt, ctx.wide, SHARED.generation, *axes)
    kept: Tables | None = cache.entries.get(key)
    if kept is not None:
        return kept
    table = position_table(enc, max(axes) + 1, ctx=ctx, cdt=cdt)
    if table is None or len(columns) != table[0].shape[-1] or table[0].ndim != 2:
        return None
    width, xp = len(columns), ctx.xp
    with _delegation.cache_scope(xp):  # (not torch inference tensors)
        idx = xp.asarray([[axes[a] * width + i for i, a in enumerate(columns)]],
                         device=ctx.device)
        entries = (_delegation.take_entries(table[0], idx, xp=xp),
                   _delegation.take_entries(table[1], idx, xp=xp))
    # (none with the tables off, a budget of 0; nor wrapped by a torch.func transform)
    if SHARED.budget and _delegation.cacheable(entries[0], ctx=ctx):
        if len(cache.entries) >= ENTRIES_KEPT:
            cache.entries.clear()
        cache.entries[key] = entries
    return entries


def gather_rows(enc: RotaryEncoder, pos: Any, xshape: tuple[int, ...], *, ctx: Ctx,
                cdt: Any) -> Tables | None:
    """Integer ``positions`` in the range of :func:`position_table`: its rows at them (one
    gather instead of trigonometry); None otherwise (the caller computes)."""
    xp = ctx.xp
    shape = tuple(pos.shape)
    if (not _may_read(pos, shape, xshape, xp=xp)
            or tuple(enc._position_batch_shape(pos)) != shape):
        return None
    cache = enc._table_cache
    last, token = cache.last_ids, _delegation.values_token(pos, xp=xp)
    if (last is not None and last[0] is pos and token is not None and last[1] == token
            and last[2] is cdt and last[4] == SHARED.generation and last[6] is ctx.wide):
        return last[5]  # type: ignore[no-any-return]  # the same positions object, unchanged
    rows = _gather_rows(enc, pos, shape, ctx=ctx, cdt=cdt)
    if rows is not None and token is not None and (
            kept_rows(cache, rows) or _delegation.cacheable(rows[0], ctx=ctx)):
        cache.last_ids = (pos, token, cdt, ctx.device, SHARED.generation, rows, ctx.wide)
    return rows


def _gather_rows(enc: RotaryEncoder, pos: Any, shape: tuple[int, ...], *, ctx: Ctx,
                 cdt: Any) -> Tables | None:
    xp = ctx.xp
    size = 1
    for n in shape:
        size *= int(n)
    if size == 0:
        return None
    if size == 1:  # one decode position: a slice, which broadcasts as the positions do
        rows = one_row(enc, pos, ctx=ctx, cdt=cdt)
        if rows is None or shape:
            return rows
        return xp.reshape(rows[0], (-1,)), xp.reshape(rows[1], (-1,))  # x is (dim,)
    bounds = _delegation.int_bounds(pos, ctx=ctx)
    if bounds is None:  # staged by an enclosing trace: values unknown
        return None
    lo, hi = bounds
    if lo < 0:
        return None
    table = position_table(enc, hi + 1, ctx=ctx, cdt=cdt)
    if table is None:
        return None
    cos, sin = table
    return ctx.backend.take(cos, pos, axis=0), ctx.backend.take(sin, pos, axis=0)


def token_row(enc: RotaryEncoder, pos: Any, xshape: tuple[int, ...], *, ctx: Ctx,
              cdt: Any) -> Tables | None:
    """Multi-axis integer ``pos`` ``(num_axes, 1, ..., 1)`` of one token (a decode step): its
    tables from the position table (see :func:`one_row`); None for any other positions (the
    caller computes)."""
    batch = tuple(pos.shape)[1:]
    if not batch or math.prod(batch) != 1 or not _may_read(pos, batch, xshape, xp=ctx.xp):
        return None
    return one_row(enc, pos, ctx=ctx, cdt=cdt)


def _may_read(pos: Any, batch: tuple[int, ...], xshape: tuple[int, ...], *, xp: Any) -> bool:
    """Whether positions of batch shape ``batch`` may be served by rows of the position table:
    integers, broadcasting into ``x`` (of ``xshape``), read on the host without a device
    synchronization."""
    return (pos.dtype in (xp.int32, xp.int64) and broadcasts_into(batch, xshape[:-1])
            and _delegation.reads_cheaply(pos, xp=xp))


def cos_sin_rows(enc: RotaryEncoder, pos: Any, *, ctx: Ctx, dtype: Any) -> Tables | None:
    """``enc.cos_sin``'s half-width tables at integer ``pos`` as rows of the position table of
    ``dtype``, each ``(*pos.shape, rotary_dim/2)``; None where the table does not serve them
    (its class, the dtype, the positions; see :func:`gather_rows`). Only float32 and float64
    tables: their rows are the wide values rounded once to ``dtype``, as computing gives, where
    a narrower dtype would need a second rounding."""
    xp = ctx.xp
    if not type(enc)._table_use.position_ids or dtype not in (xp.float32, xp.float64):
        return None
    shape = tuple(pos.shape)
    rows = gather_rows(enc, pos, (*shape, enc._head_dim()), ctx=ctx, cdt=dtype)
    if rows is None or tuple(rows[0].shape[:-1]) == shape:
        return rows
    half = rows[0].shape[-1]
    return xp.reshape(rows[0], (*shape, half)), xp.reshape(rows[1], (*shape, half))
