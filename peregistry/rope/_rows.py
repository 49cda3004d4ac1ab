"""The rows of a rotary encoder's table of positions: :class:`PositionRows`, the part of
:class:`~peregistry.RotaryEncoder` that serves integer positions from the one store of tables
(:data:`._tables.STORE`).

A rotary encoder keeps one table per device and dtype: the half-width ``(cos, sin)`` of
positions ``0 .. n-1`` (``n`` a power of two, grown by doubling). ``positions=None`` at an
integer ``offset`` reads rows ``offset .. offset+seq-1`` (a slice) and integer position ids
gather rows. The angles are elementwise, so each row is what computing that position alone
gives: results equal a fresh computation, bit for bit.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, ClassVar

import peregistry.rope._delegation as _delegation

from ..backends._base import Ctx
from ._tables import STORE

if TYPE_CHECKING:
    from ..kinds.rotary import RotaryKind as _Rows  # what the mixin is mixed into
else:
    _Rows = object

__all__ = ["MIN_ROWS", "PositionRows", "Tables"]

Tables = tuple[Any, Any]
#: The smallest position table: decoding grows it rarely.
MIN_ROWS = 1024


class PositionRows(_Rows):
    """Rows of the encoder's table of positions (a mixin of :class:`~peregistry.RotaryEncoder`,
    which gives :meth:`_default_positions` and :meth:`_table`)."""

    __slots__ = ()
    _POSITION_TABLE_BYTES: ClassVar[int]
    _rows_at_offsets: ClassVar[bool]

    if TYPE_CHECKING:
        def _default_positions(self, seq: int, offset: Any, *, ctx: Ctx) -> Any: ...
        def _table(self, pos: Any, *, ctx: Ctx, seq_len: int | None, tracing: bool,
                   static_len: int | None) -> tuple[Any, Any]: ...

    def _position_table(self, end: int, *, ctx: Ctx, cdt: Any) -> Tables | None:
        """Half-width ``(cos, sin)`` of positions ``0 .. n-1`` (``n >= end``) of ``self`` in ``cdt``,
        kept in :data:`STORE`; None where no table serves: the encoder's tables depend on the
        sequence length or its class's ``positions=None`` are not ``offset + arange(seq)``, or the
        table would not fit in ``self._POSITION_TABLE_BYTES`` or the store's budget."""
        # equal encoders (class and options) share a table; two registries may resolve a scaling
        # name differently
        scaling = getattr(getattr(self, "_scaled", None), "scaling", None)
        xp = ctx.xp
        # (equal dtypes spelled apart, np.float32 and dtype('float32'), share one entry)
        bits = 32 if cdt == xp.float32 else 64 if cdt == xp.float64 else cdt
        key = ("rotary positions", type(self), self._key, type(scaling), ctx.device, bits, ctx.wide)
        have = STORE.get(key)
        if have is not None and 0 < end <= have[0].shape[-2]:
            return have  # type: ignore[no-any-return]
        if end <= 0 or not type(self)._rows_at_offsets or self._seq_len_dependence()[0] != "none":
            return None
        n = 1 << max(MIN_ROWS.bit_length() - 1, (end - 1).bit_length())
        if have is not None:
            n = max(n, 2 * have[0].shape[-2])
        nbytes = 2 * n * self._table_width() * (ctx.xp.finfo(cdt).bits // 8)
        if nbytes > min(self._POSITION_TABLE_BYTES, STORE.budget):
            return None
        with _delegation.cache_scope(xp):  # (torch: not an inference tensor)
            pos = self._default_positions(n, 0, ctx=ctx)
            cos, sin = self._table(pos, ctx=ctx, seq_len=None, tracing=False, static_len=n)
            table = (cos if cos.dtype == cdt else xp.astype(cos, cdt),
                     sin if sin.dtype == cdt else xp.astype(sin, cdt))
        if _delegation.cacheable(table[0], ctx=ctx):  # (inside an enclosing trace JAX stages it)
            STORE.put(key, table, nbytes)
        return table


    def _offset_rows(self, offset: int, seq: int, *, ctx: Ctx,
                    cdt: Any) -> Tables | None:
        """Rows ``offset .. offset+seq-1`` of :meth:`_position_table` (views), or None."""
        if offset < 0:
            return None
        table = self._position_table(offset + seq, ctx=ctx, cdt=cdt)
        if table is None:
            return None
        return table[0][..., offset:offset + seq, :], table[1][..., offset:offset + seq, :]


    def _gathered_rows(self, pos: Any, *, ctx: Ctx, cdt: Any) -> Tables | None:
        """The rows of :meth:`_position_table` at eager integer ids ``pos`` (int32 or int64, read
        on the host without a device synchronization), each ``(*pos.shape, width)``; None where the
        table does not serve them (a negative id, a trace, no table)."""
        xp = ctx.xp
        if pos.dtype not in (xp.int32, xp.int64):
            return None
        # the usual ids: a few on the host (NumPy, CPU torch), read as a list
        values = _delegation.short_ints(pos, ctx=ctx, limit=64)
        if values is not None and len(values) > 1:
            bounds: tuple[int, int] | None = (min(values), max(values))
        elif not _delegation.reads_cheaply(pos, xp=xp):
            return None
        elif math.prod(pos.shape) == 1:
            return self._one_row(pos, ctx=ctx, cdt=cdt)
        else:
            bounds = _delegation.int_bounds(pos, ctx=ctx) if math.prod(pos.shape) else None
        if bounds is None or bounds[0] < 0:
            return None
        table = self._position_table(bounds[1] + 1, ctx=ctx, cdt=cdt)
        if table is None:
            return None
        return ctx.backend.take(table[0], pos, axis=0), ctx.backend.take(table[1], pos, axis=0)


    def _one_row(self, pos: Any, *, ctx: Ctx, cdt: Any) -> Tables | None:
        """A decode step's one position: its row of the table (a view), shaped as the positions."""
        if not _delegation.rows_pay_off(ctx.xp):
            return None  # (eager JAX: slicing costs more than computing)
        p = _delegation.read_one(pos, ctx=ctx)
        if p is None or p < 0:
            return None
        table = self._position_table(p + 1, ctx=ctx, cdt=cdt)
        if table is None:
            return None
        # row p as a view shaped (1, ..., 1, width) like the positions, by one indexing
        row = (*(None,) * (pos.ndim - 1), slice(p, p + 1), slice(None)) if pos.ndim \
            else (p, slice(None))
        return table[0][row], table[1][row]

    def _token_rows(self, pos: Any, *, ctx: Ctx, cdt: Any) -> Tables | None:
        """The rows of one multi-axis token (:class:`~.scaled.MultiAxisRotary`); None here."""
        return None
