"""Eager caches of a rotary encoder's cos/sin tables, as small typed objects.

Two caches per encoder (:class:`TableCache`), both only in eager mode (never while tracing under
``jax.jit``/``torch.compile``, never torch inference tensors):

* the **position table**: half-width ``(cos, sin)`` of positions ``0 .. n-1`` (``n`` a power of
  two, grown by doubling), per device and dtype, kept while it fits in a byte budget. Decoding at
  ``offset`` reads rows ``offset .. offset+seq-1`` (a slice); integer position ids gather rows.
  Each row is what computing that position alone gives (the angles are elementwise), so results
  equal a fresh computation: decoding then costs a slice instead of trigonometry.
* the **offset tables**: the tables of ``positions=None`` at one ``(offset, seq)``, for encoders
  or sizes the position table does not serve (a bounded, first-in first-out dict).

Which shortcut a class may take is decided once per class (:class:`TableUse`): a subclass whose
``positions=None`` means something else than ``offset + arange(seq)`` must not read rows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import _delegation

if TYPE_CHECKING:
    from ..encoders.base import Ctx
    from .encoder import RotaryEncoder

Tables = tuple[Any, Any]


@dataclass(frozen=True, slots=True)
class TableUse:
    """For a rotary encoder class: whether rows ``o .. o+seq-1`` of the position table are the
    tables of ``positions=None, offset=o`` (``offset_rows``), and whether integer position ids
    index the position table (``position_ids``)."""

    offset_rows: bool
    position_ids: bool

    @classmethod
    def of(cls, klass: type[RotaryEncoder], base: type[RotaryEncoder]) -> TableUse:
        """The first holds if ``klass`` keeps ``base``'s default positions and batch shape, or the
        class defining its default positions declares ``_offset_rows_are_positions`` in its own
        body; the second only if the default positions are ``base``'s."""
        owner = next(c for c in klass.__mro__ if "_default_positions" in c.__dict__)
        ours = owner is base and klass._position_batch_shape is base._position_batch_shape
        declared = bool(owner.__dict__.get("_offset_rows_are_positions", False))
        return cls(offset_rows=ours or declared, position_ids=ours)


@dataclass(frozen=True, slots=True)
class OffsetKey:
    """What the tables of ``positions=None`` depend on besides the encoder."""

    offset: int
    seq: int
    seq_len: int | None
    device: str
    dtype: Any


@dataclass(slots=True)
class TableCache:
    """The eager tables of one encoder; never part of its identity. Created with the encoder,
    so that a trace never sees the cache object itself change."""

    #: ``(device key, dtype)`` -> half-width ``(cos, sin)`` of positions ``0 .. n-1``.
    positions: dict[tuple[Any, Any], Tables] = field(default_factory=dict)
    #: the tables of ``positions=None`` at one offset and length.
    offsets: dict[OffsetKey, Tables] = field(default_factory=dict)

    def keep_offset(self, key: OffsetKey, tables: Tables, *, limit: int) -> None:
        """Keep ``tables`` under ``key``, dropping the oldest entry beyond ``limit``."""
        if len(self.offsets) >= limit:
            self.offsets.pop(next(iter(self.offsets)))
        self.offsets[key] = tables


def device_key(device: Any) -> Any:
    """A dict key for a device: itself if hashable (torch, JAX), else its string."""
    try:
        hash(device)
    except TypeError:
        return str(device)
    return device


def broadcasts_into(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """True if ``shape`` broadcasts to exactly ``target`` (never enlarging it)."""
    if len(shape) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(shape), reversed(target), strict=False))


def position_table(enc: RotaryEncoder, end: int, *, ctx: Ctx, cdt: Any) -> Tables | None:
    """Half-width ``(cos, sin)`` of positions ``0 .. n-1`` (``n >= end``) for ``enc``, computed
    once per device and dtype; None if they would not fit in ``enc._POSITION_TABLE_BYTES``, or if
    the tables depend on the sequence length (``dynamic``/``longrope`` scalings)."""
    tables = enc._table_cache.positions
    key = (device_key(ctx.device), cdt)
    have = tables.get(key)
    if have is not None and 0 < end <= have[0].shape[-2]:  # the decode step's path
        return have
    if (end <= 0 or enc._seq_len_dependence()[0] != "none"
            or not type(enc)._table_use.offset_rows):
        return None
    itemsize = ctx.xp.finfo(cdt).bits // 8
    half = enc._rotary_dim() // 2
    budget = enc._POSITION_TABLE_BYTES
    n = 1 << max(10, (end - 1).bit_length())
    if 2 * n * half * itemsize > budget:
        return None
    if have is not None:
        n = max(n, 2 * have[0].shape[-2])
        if 2 * n * half * itemsize > budget:
            n = 1 << (end - 1).bit_length()
    xp = ctx.xp
    with _delegation.cache_scope(xp):
        pos = enc._default_positions(n, 0, ctx=ctx)
        cos, sin = enc._table(pos, ctx=ctx, seq_len=None, tracing=False, static_len=n)
        table = (xp.astype(cos, cdt), xp.astype(sin, cdt))
    if _delegation.cacheable(table[0], ctx=ctx):  # not inside a trace (JAX stages constants)
        tables[key] = table
    return table


def table_rows(enc: RotaryEncoder, offset: int, seq: int, *, ctx: Ctx,
               cdt: Any) -> Tables | None:
    """Rows ``offset .. offset+seq-1`` of :func:`position_table` (views), or None."""
    if offset < 0:
        return None
    table = position_table(enc, offset + seq, ctx=ctx, cdt=cdt)
    if table is None:
        return None
    cos, sin = table
    return cos[..., offset:offset + seq, :], sin[..., offset:offset + seq, :]


def gather_rows(enc: RotaryEncoder, pos: Any, xshape: tuple[int, ...], *, ctx: Ctx,
                cdt: Any) -> Tables | None:
    """Integer ``positions`` in the range of :func:`position_table`: its rows at them (one
    gather instead of trigonometry); None otherwise (the caller computes)."""
    xp = ctx.xp
    shape = tuple(pos.shape)
    if (pos.dtype not in (xp.int32, xp.int64) or not broadcasts_into(shape, xshape[:-1])
            or tuple(enc._position_batch_shape(pos)) != shape
            or not _delegation.reads_cheaply(pos, xp=xp)):
        return None
    size = 1
    for n in pos.shape:
        size *= int(n)
    if size == 0:
        return None
    if size == 1:  # one decode position: a slice
        one = xp.reshape(pos, ())
        if ctx.backend.is_tracing(one):  # staged by an enclosing trace
            return None
        p = int(one)
        rows = table_rows(enc, p, 1, ctx=ctx, cdt=cdt) if p >= 0 else None
        if rows is None or len(shape) == 1:
            return rows
        return (xp.reshape(rows[0], (*shape, rows[0].shape[-1])),
                xp.reshape(rows[1], (*shape, rows[1].shape[-1])))
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
