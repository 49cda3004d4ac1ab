"""The one store of computed tables, and the tables of positions of a rotary encoder:
:class:`PositionTables`, the part of :class:`~peregistry.RotaryEncoder` that gives the
half-width ``(cos, sin)`` of validated positions, as rows of its table in the store or computed
by its hook.

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
from typing import TYPE_CHECKING, Any, ClassVar

import peregistry.rope._delegation as _delegation

from .._jax_eager import compiled_hook, is_jax_namespace
from ..backends._base import Ctx

if TYPE_CHECKING:
    from ..kinds.rotary import RotaryKind as _Tables  # what the mixin is mixed into
else:
    _Tables = object

__all__ = ["MIN_ROWS", "STORE", "PositionTables", "Store", "Tables", "clear_caches",
           "set_table_cache_bytes", "table_cache_bytes"]

Tables = tuple[Any, Any]
#: The smallest position table: decoding grows it rarely.
MIN_ROWS = 1024

#: The default budget of :data:`STORE`, unless ``PEREGISTRY_TABLE_CACHE_BYTES`` says otherwise.
DEFAULT_BUDGET = 256 << 20


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
    if (base := modules.get("peregistry.kinds.base")) is not None:
        base._DTYPE_KINDS.clear()
    # the default registry, through the services it installed (an engine module never
    # imports the registry)
    services = modules["peregistry.kinds._services"]._default
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


class PositionTables(_Tables):
    """The half-width tables of validated positions (a mixin of
    :class:`~peregistry.RotaryEncoder`, which gives :meth:`_default_positions`).

    A rotary encoder keeps one table per device and dtype: the half-width ``(cos, sin)`` of
    positions ``0 .. n-1`` (``n`` a power of two, grown by doubling). ``positions=None`` at an
    integer ``offset`` reads rows ``offset .. offset+seq-1`` (a slice) and integer position ids
    gather rows. The angles are elementwise, so each row is what computing that position alone
    gives: results equal a fresh computation, bit for bit. Other positions are computed by the
    subclass's hook :meth:`_half_cos_sin` (:meth:`_table`)."""

    __slots__ = ()
    _POSITION_TABLE_BYTES: ClassVar[int]
    _rows_at_offsets: ClassVar[bool]
    _rows_at_ids: ClassVar[bool]

    if TYPE_CHECKING:
        def _default_positions(self, seq: int, offset: Any, *, ctx: Ctx) -> Any: ...

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

    def _tables_at(self, pos: Any, *, ctx: Ctx, cdt: Any, seq_len: int | None,
                   tracing: bool) -> tuple[Any, Any]:
        """Half-width ``(cos, sin)`` at validated ``pos``: rows of the table of positions in
        ``cdt`` (eager integer ids, ``cdt`` float32/float64: the wide values rounded once, as
        computing gives), else computed in ``ctx.wide``."""
        xp = ctx.xp
        if not tracing and type(self)._rows_at_ids and cdt in (xp.float32, xp.float64):
            rows = self._gathered_rows(pos, ctx=ctx, cdt=cdt)
            if rows is not None:
                return rows
        return self._table(pos, ctx=ctx, seq_len=seq_len, tracing=tracing, static_len=None)

    def _hook_cos_sin(self, pos: Any, *, ctx: Ctx, seq_len: int | None) -> tuple[Any, Any]:
        """:meth:`_half_cos_sin`, the subclass's hook. On eager JAX it runs compiled as one
        program (the same bits, see :mod:`peregistry._jax_eager`): eager JAX compiles every
        operation anew for each new shape, tens of them for one table."""
        if is_jax_namespace(ctx.xp) and not ctx.backend.is_tracing(pos):
            out: tuple[Any, Any] | None = compiled_hook(self, "_half_cos_sin", (pos,),
                                                        seq_len=seq_len)
            if out is not None:
                return out
        return self._half_cos_sin(pos, ctx=ctx, seq_len=seq_len)

    def _table(self, pos: Any, *, ctx: Ctx, seq_len: int | None, tracing: bool,
               static_len: int | None) -> tuple[Any, Any]:
        """Half-width ``(cos, sin)`` with the sequence length resolved (see :meth:`cos_sin`)."""
        dependence, breakpoints = self._seq_len_dependence()
        if dependence == "none":
            return self._hook_cos_sin(pos, ctx=ctx, seq_len=None)
        if seq_len is None:
            seq_len = static_len
        if seq_len is None and not tracing:
            size = 1
            for n in pos.shape:
                size *= int(n)
            if size:
                seq_len = math.floor(float(ctx.xp.max(pos))) + 1
        if seq_len is not None or not tracing:
            return self._hook_cos_sin(pos, ctx=ctx, seq_len=seq_len)
        if dependence == "piecewise":
            xp = ctx.xp
            s = xp.max(pos) + 1
            cos, sin = self._half_cos_sin(pos, ctx=ctx, seq_len=breakpoints[0] if breakpoints
                                          else None)
            for t in breakpoints:
                c, si = self._half_cos_sin(pos, ctx=ctx, seq_len=t + 1)
                cos = xp.where(s > t, c, cos)
                sin = xp.where(s > t, si, sin)
            return cos, sin
        raise ValueError(
            f"{self.name}: this scaling depends on the sequence length, which cannot be read "
            f"from traced positions (jax.jit / torch.compile); pass seq_len=<int> (Hugging "
            f"Face uses max(positions) + 1), or positions=None with an int offset"
        )
