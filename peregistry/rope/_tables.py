"""The one store of computed tables, and the position tables rotary encoders keep in it.

Whatever peregistry keeps between calls sits in :data:`STORE`: entries keyed by the values that
determine them (an encoder's class and options, the device, the dtypes, what they cover), least
recently used first out beyond one byte budget (:func:`set_table_cache_bytes`; 0 keeps
nothing), emptied by :func:`clear_caches`, one lock around each lookup and insertion. An entry
is found again only through an equal key, never through an object's identity or a version
counter, and nothing made inside a trace or an inference-mode region is kept.

A rotary encoder keeps one table per device and dtype: the half-width ``(cos, sin)`` of
positions ``0 .. n-1`` (``n`` a power of two, grown by doubling). ``positions=None`` at an
integer ``offset`` reads rows ``offset .. offset+seq-1`` (a slice) and integer position ids
gather rows. The angles are elementwise, so each row is what computing that position alone
gives: results equal a fresh computation, bit for bit.
"""

from __future__ import annotations

import _thread
import math
import os
import sys
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

import peregistry.rope._delegation as _delegation

if TYPE_CHECKING:
    from ..encoders.context import Ctx
    from .encoder import RotaryEncoder
    from .scaled import MultiAxisRotary

__all__ = ["STORE", "Store", "clear_caches", "gathered_rows", "offset_rows", "position_table",
           "set_table_cache_bytes", "table_cache_bytes", "token_rows"]

Tables = tuple[Any, Any]

#: The default budget of :data:`STORE`, unless ``PEREGISTRY_TABLE_CACHE_BYTES`` says otherwise.
DEFAULT_BUDGET = 256 << 20
#: The smallest position table: decoding grows it rarely.
MIN_ROWS = 1024


def _budget_from_env() -> int:
    text = os.environ.get("PEREGISTRY_TABLE_CACHE_BYTES", "").strip()
    if not text:
        return DEFAULT_BUDGET
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"PEREGISTRY_TABLE_CACHE_BYTES must be a number of bytes >= 0, got "
                         f"{text!r}")
    return value


class Store:
    """Entries keyed by value, least recently used first out beyond a byte budget. Thread-safe:
    each lookup, insertion and reading of the bytes kept holds one lock, and an insertion makes
    room before it adds, so no reader ever sees more bytes kept than the budget. Evicted values
    are let go after the lock is released (their finalizers may read the store)."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()  # threading.Lock, without importing threading
        self._entries: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._budget: int | None = None  # read from the environment on first use

    @property
    def budget(self) -> int:
        with self._lock:
            return self._budget_locked()

    def _budget_locked(self) -> int:
        if self._budget is None:  # (under the lock: a concurrent set_budget is not overwritten)
            self._budget = _budget_from_env()
        return self._budget

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._bytes

    def usage(self) -> tuple[int, int]:
        """``(bytes kept, budget)``, read together under the lock."""
        with self._lock:
            return self._bytes, self._budget_locked()

    def get(self, key: Any) -> Any:
        """The entry of ``key``, or None (also for a key that cannot be hashed)."""
        with self._lock:
            try:
                entry = self._entries.get(key)
            except TypeError:
                return None
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: Any, value: Any, nbytes: int) -> None:
        """Keep ``value`` (of ``nbytes``) under ``key``, if it fits in the budget at all."""
        released: list[Any] = []  # let go of after the lock
        with self._lock:
            budget = self._budget_locked()
            try:
                old = self._entries.pop(key, None)
            except TypeError:
                return
            if old is not None:
                self._bytes -= old[1]
                released.append(old)
            if nbytes > budget:
                return
            self._evict_locked(budget - nbytes, released)  # room first, then the new entry
            self._entries[key] = (value, nbytes)
            self._bytes += nbytes
        released.clear()

    def _evict_locked(self, most: int, released: list[Any]) -> None:
        """Least recently used entries out until at most ``most`` bytes are kept."""
        while self._bytes > most:
            released.append(self._entries.popitem(last=False))
            self._bytes -= released[-1][1][1]

    def set_budget(self, nbytes: int) -> None:
        released: list[Any] = []
        with self._lock:
            self._budget = nbytes
            self._evict_locked(nbytes, released)
        released.clear()

    def clear(self) -> None:
        with self._lock:
            entries, self._entries = self._entries, OrderedDict()
            self._bytes = 0
        entries.clear()


#: The one store of the process.
STORE = Store()


def clear_caches() -> None:
    """Free everything peregistry keeps between calls (docs/architecture.md lists it): the
    tables of :data:`STORE`; the programs compiled for eager JAX calls and the hooks that did
    not trace; the active rotation kernels (read again from the registry on the next rotary
    encoder); the kinds of dtypes seen; the default registry's adapter of each array type and
    its adapters' memos (a ``Ctx``, a device, torch's probes). Made again on next use; results
    never change, only speed. What a registration changes (the plugins and what their hooks
    gave) is renewed by ``register``/``unregister``. A module not imported yet keeps nothing, so
    none is imported here."""
    STORE.clear()
    modules = sys.modules
    if (jax_eager := modules.get("peregistry._jax_eager")) is not None:
        jax_eager.clear()
    if (kernels := modules.get("peregistry.rope._kernels")) is not None:
        kernels.reset()
    if (base := modules.get("peregistry.encoders.base")) is not None:
        base._DTYPE_KINDS.clear()
    # the default registry, through the services it installed (an engine module never
    # imports the registry)
    services = modules["peregistry._services"]._default
    clear_memos = getattr(services, "clear_memos", None)
    if callable(clear_memos):
        clear_memos()


def set_table_cache_bytes(nbytes: int) -> None:
    """Set the bytes everything peregistry keeps may take together (default 256 MiB, or
    ``PEREGISTRY_TABLE_CACHE_BYTES``); least recently used first out. 0 keeps nothing."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"set_table_cache_bytes: nbytes must be an int >= 0, got {nbytes!r}")
    STORE.set_budget(nbytes)


def table_cache_bytes() -> tuple[int, int]:
    """``(bytes kept, budget)`` of the store, read together: bytes kept never exceed it."""
    return STORE.usage()


def position_table(enc: RotaryEncoder, end: int, *, ctx: Ctx, cdt: Any) -> Tables | None:
    """Half-width ``(cos, sin)`` of positions ``0 .. n-1`` (``n >= end``) of ``enc`` in ``cdt``,
    kept in :data:`STORE`; None where no table serves: the encoder's tables depend on the
    sequence length or its class's ``positions=None`` are not ``offset + arange(seq)``, or the
    table would not fit in ``enc._POSITION_TABLE_BYTES`` or the store's budget."""
    # equal encoders (class and options) share a table; two registries may resolve a scaling
    # name differently
    scaling = getattr(getattr(enc, "_scaled", None), "scaling", None)
    xp = ctx.xp
    # (equal dtypes spelled apart, np.float32 and dtype('float32'), share one entry)
    bits = 32 if cdt == xp.float32 else 64 if cdt == xp.float64 else cdt
    key = ("rotary positions", type(enc), enc._key, type(scaling), ctx.device, bits, ctx.wide)
    have = STORE.get(key)
    if have is not None and 0 < end <= have[0].shape[-2]:
        return have  # type: ignore[no-any-return]
    if end <= 0 or not type(enc)._rows_at_offsets or enc._seq_len_dependence()[0] != "none":
        return None
    n = 1 << max(MIN_ROWS.bit_length() - 1, (end - 1).bit_length())
    if have is not None:
        n = max(n, 2 * have[0].shape[-2])
    nbytes = 2 * n * enc._table_width() * (ctx.xp.finfo(cdt).bits // 8)
    if nbytes > min(enc._POSITION_TABLE_BYTES, STORE.budget):
        return None
    with _delegation.cache_scope(xp):  # (torch: not an inference tensor)
        pos = enc._default_positions(n, 0, ctx=ctx)
        cos, sin = enc._table(pos, ctx=ctx, seq_len=None, tracing=False, static_len=n)
        table = (cos if cos.dtype == cdt else xp.astype(cos, cdt),
                 sin if sin.dtype == cdt else xp.astype(sin, cdt))
    if _delegation.cacheable(table[0], ctx=ctx):  # (inside an enclosing trace JAX stages it)
        STORE.put(key, table, nbytes)
    return table


def offset_rows(enc: RotaryEncoder, offset: int, seq: int, *, ctx: Ctx,
                cdt: Any) -> Tables | None:
    """Rows ``offset .. offset+seq-1`` of :func:`position_table` (views), or None."""
    if offset < 0:
        return None
    table = position_table(enc, offset + seq, ctx=ctx, cdt=cdt)
    if table is None:
        return None
    return table[0][..., offset:offset + seq, :], table[1][..., offset:offset + seq, :]


def gathered_rows(enc: RotaryEncoder, pos: Any, *, ctx: Ctx, cdt: Any) -> Tables | None:
    """The rows of :func:`position_table` at eager integer ids ``pos`` (int32 or int64, read
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
        return _one_row(enc, pos, ctx=ctx, cdt=cdt)
    else:
        bounds = _delegation.int_bounds(pos, ctx=ctx) if math.prod(pos.shape) else None
    if bounds is None or bounds[0] < 0:
        return None
    table = position_table(enc, bounds[1] + 1, ctx=ctx, cdt=cdt)
    if table is None:
        return None
    return ctx.backend.take(table[0], pos, axis=0), ctx.backend.take(table[1], pos, axis=0)


def _one_row(enc: RotaryEncoder, pos: Any, *, ctx: Ctx, cdt: Any) -> Tables | None:
    """A decode step's one position: its row of the table (a view), shaped as the positions."""
    if not _delegation.rows_pay_off(ctx.xp):
        return None  # (eager JAX: slicing costs more than computing)
    p = _delegation.read_one(pos, ctx=ctx)
    if p is None or p < 0:
        return None
    table = position_table(enc, p + 1, ctx=ctx, cdt=cdt)
    if table is None:
        return None
    # row p as a view shaped (1, ..., 1, width) like the positions, by one indexing
    row = (*(None,) * (pos.ndim - 1), slice(p, p + 1), slice(None)) if pos.ndim \
        else (p, slice(None))
    return table[0][row], table[1][row]


def token_rows(enc: MultiAxisRotary, pos: Any, *, ctx: Ctx, cdt: Any) -> Tables | None:
    """Multi-axis ids ``(num_axes, 1, ..., 1)`` of one token, each axis at its own position:
    its row of the table of text positions (a view) when every axis is at one position ``p``
    (a text token while decoding), else each column from the row of its axis's position
    (:meth:`~.scaled.MultiAxisRotary._column_axes`), shaped as the token's batch axes; None for
    any other ids, or an encoder whose columns do not each follow one axis (the caller
    computes)."""
    xp = ctx.xp
    batch = tuple(pos.shape[1:])
    if (pos.dtype not in (xp.int32, xp.int64) or not batch or math.prod(batch) != 1
            or not _delegation.rows_pay_off(xp) or not _delegation.reads_cheaply(pos, xp=xp)):
        return None
    axes = _delegation.read_ints(pos, ctx=ctx)
    if not axes or min(axes) < 0:
        return None
    text = min(axes) == max(axes)
    columns = None if text else enc._column_axes()
    if not text and columns is None:
        return None
    table = position_table(enc, max(axes) + 1, ctx=ctx, cdt=cdt)
    if table is None:
        return None
    width = table[0].shape[-1]
    shape = (*batch, width)
    if columns is None:  # a text token
        p = axes[0]
        return xp.reshape(table[0][p:p + 1, :], shape), xp.reshape(table[1][p:p + 1, :], shape)
    # column j of the token's row = column j of the row at its axis's position (flat index)
    idx = xp.reshape(xp.asarray([axes[a] * width + j for j, a in enumerate(columns)],
                                device=ctx.device), shape)
    take = ctx.backend.take
    return (take(xp.reshape(table[0], (-1,)), idx, axis=0),
            take(xp.reshape(table[1], (-1,)), idx, axis=0))
