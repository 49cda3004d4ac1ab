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

import _thread
import contextlib
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import _lazy

if TYPE_CHECKING:
    from ..encoders.base import Ctx
    from . import _delegation
    from .encoder import RotaryEncoder
else:  # imported by the first call that needs it (peregistry/_lazy.py)
    _delegation = _lazy.delegation(globals())

Tables = tuple[Any, Any]


@dataclass(frozen=True, slots=True)
class TableUse:
    """For a rotary encoder class: whether rows ``o .. o+seq-1`` of the position table are the
    tables of ``positions=None, offset=o`` (``offset_rows``), whether integer position ids
    index the position table (``position_ids``), and whether one token's multi-axis ids are
    read from it (``token_ids``: a text token's row, an image token's entries; decided by
    :class:`~.scaled.MultiAxisRotary`)."""

    offset_rows: bool
    position_ids: bool
    token_ids: bool = False

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
    wide: Any = None  # the dtype angles are computed in (JAX's x64 flag may change it)


#: Default total bytes of all position tables of a process (``PEREGISTRY_TABLE_CACHE_BYTES``).
DEFAULT_SHARED_BYTES = 256 << 20


def _budget_from_env() -> int:
    text = os.environ.get("PEREGISTRY_TABLE_CACHE_BYTES", "").strip()
    if not text:
        return DEFAULT_SHARED_BYTES
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"PEREGISTRY_TABLE_CACHE_BYTES must be a number of bytes >= 0, got "
                         f"{text!r}") from None
    if value < 0:
        raise ValueError(f"PEREGISTRY_TABLE_CACHE_BYTES must be a number of bytes >= 0, got "
                         f"{text!r}")
    return value


class _Key:
    """A key of :data:`SHARED` whose hash is computed once (the decode step looks it up on
    every call)."""

    __slots__ = ("_hash", "parts")

    def __init__(self, parts: tuple[Any, ...]) -> None:
        self.parts = parts
        self._hash = hash(parts)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return self is other or (isinstance(other, _Key) and self.parts == other.parts)

    def __getitem__(self, i: int) -> Any:
        return self.parts[i]


class SharedTables:
    """The position tables of every rotary encoder of the process, shared by equal encoders
    (one per layer of a model hash equal and so use one table), least recently used first out
    beyond a total byte budget. Thread-safe: one lock around each lookup and insertion."""

    def __init__(self) -> None:
        self._lock = _thread.allocate_lock()  # threading.Lock, without importing threading
        self._entries: OrderedDict[Any, tuple[Tables, int]] = OrderedDict()
        self._bytes = 0
        self._budget: int | None = None  # read from the environment on first use
        #: bumped whenever tables are dropped (cleared or evicted): the encoders' memos of
        #: calls and rows expire with it.
        self.generation = 0

    @property
    def budget(self) -> int:
        if self._budget is None:
            self._budget = _budget_from_env()
        return self._budget

    def set_budget(self, nbytes: int) -> None:
        with self._lock:
            self._budget = int(nbytes)
            self.generation += 1
            self._evict()

    @property
    def nbytes(self) -> int:
        return self._bytes

    def get(self, key: Any) -> Tables | None:
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: Any, tables: Tables, nbytes: int) -> None:
        budget = self.budget
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            if nbytes > budget:
                return
            self._entries[key] = (tables, nbytes)
            self._bytes += nbytes
            self._evict()

    def keys_of(self, owner: Any) -> dict[Any, Tables]:
        """The tables of one encoder identity, by ``(device key, dtype, wide dtype)``."""
        with self._lock:
            return {k.parts[1:]: v[0] for k, v in self._entries.items() if k[0] == owner}

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0
            self.generation += 1

    def _evict(self) -> None:
        budget = self.budget if self._budget is None else self._budget
        while self._bytes > budget and self._entries:
            _, (_, n) = self._entries.popitem(last=False)
            self._bytes -= n
            self.generation += 1  # the encoders' memos may hold it: they expire


#: The one cache of position tables of the process.
SHARED = SharedTables()


def clear_caches() -> None:
    """Drop every shared position table of the process (they are rebuilt on next use)."""
    SHARED.clear()


def set_table_cache_bytes(nbytes: int) -> None:
    """Set the total bytes all position tables of the process may take (default 256 MiB, or
    ``PEREGISTRY_TABLE_CACHE_BYTES``); least recently used tables go first. 0 disables them."""
    if isinstance(nbytes, bool) or not isinstance(nbytes, int) or nbytes < 0:
        raise ValueError(f"set_table_cache_bytes: nbytes must be an int >= 0, got {nbytes!r}")
    SHARED.set_budget(nbytes)


def table_cache_bytes() -> tuple[int, int]:
    """``(bytes used, budget)`` of the shared position tables."""
    return SHARED.nbytes, SHARED.budget


def table_identity(enc: RotaryEncoder) -> Any:
    """What a position table depends on: the class, the encoder's options (equal encoders hash
    equal) and the class of its scaling type (two registries may resolve a name differently)."""
    scaled = getattr(enc, "_scaled", None)
    return (type(enc), enc, type(getattr(scaled, "scaling", None)))


@dataclass(slots=True)
class TableCache:
    """The eager tables of one encoder; never part of its identity. Created with the encoder,
    so that a trace never sees the cache object itself change. The position tables themselves
    live in :data:`SHARED`, shared with every equal encoder."""

    #: the tables of ``positions=None`` at one offset and length.
    offsets: dict[OffsetKey, Tables] = field(default_factory=dict)
    #: this encoder's key in :data:`SHARED` (set on first use: the options are known then).
    identity: Any = None
    #: ``(device key, dtype, wide dtype)`` -> the key of that table in :data:`SHARED`.
    keys: dict[tuple[Any, Any, Any], _Key] = field(default_factory=dict)
    #: The rows the last call read, with what they depend on, by offset (:func:`table_rows`)
    #: and by positions array (:func:`gather_rows`): a model rotates q and k of every layer at
    #: the same positions, and all but the first of those calls then skip the lookup. Each a
    #: tuple, replaced whole (no lock needed).
    last_rows: Any = None
    last_ids: Any = None
    #: ``(dtype, device, generation, length, (cos, sin), wide dtype)``: the position table
    #: ``last_rows`` came from, read again by the next decode step without the shared cache's
    #: lookup (a table evicted from the shared cache bumps the generation: it is not read).
    last_table: Any = None
    #: The last eager ``rotate`` calls with their tables, and the last validated signatures,
    #: newest first (:mod:`._calls`): q and k differ in shape (GQA).
    last_calls: tuple[Any, ...] = ()
    signatures: tuple[Any, ...] = ()
    #: ``(answer,)`` of the encoder's ``_column_axes`` hook once asked (it depends on the
    #: options only), and one multi-axis token's entries of the position table, by ``(device
    #: key, dtype, wide dtype, generation, *positions)``, at most :data:`ENTRIES_KEPT`
    #: (:mod:`._rows`).
    columns: tuple[Any] | None = None
    entries: dict[tuple[Any, ...], Any] = field(default_factory=dict)

    @property
    def positions(self) -> dict[tuple[Any, ...], Tables]:
        """``(device key, dtype, wide dtype)`` -> half-width ``(cos, sin)`` of positions
        ``0 .. n-1``: this encoder's entries of the shared cache (a copy)."""
        return {} if self.identity is None else SHARED.keys_of(self.identity)

    def keep_offset(self, key: OffsetKey, tables: Tables, *, limit: int) -> None:
        """Keep ``tables`` under ``key``, dropping the oldest entry beyond ``limit``."""
        if len(self.offsets) >= limit:
            # another thread may be evicting the same entry at once
            with contextlib.suppress(RuntimeError, StopIteration):
                self.offsets.pop(next(iter(self.offsets)), None)
        self.offsets[key] = tables


def device_key(device: Any) -> Any:
    """A dict key for a device: itself if hashable (torch, JAX), else its string."""
    try:
        hash(device)
    except TypeError:
        return str(device)
    return device


def position_table(enc: RotaryEncoder, end: int, *, ctx: Ctx, cdt: Any) -> Tables | None:
    """Half-width ``(cos, sin)`` of positions ``0 .. n-1`` (``n >= end``) for ``enc``, computed
    once per device and dtype; None if they would not fit in ``enc._POSITION_TABLE_BYTES``, or if
    the tables depend on the sequence length (``dynamic``/``longrope`` scalings)."""
    cache = enc._table_cache
    local = (device_key(ctx.device), cdt, ctx.wide)  # wide: JAX's x64 flag may change
    key = cache.keys.get(local)
    if key is None:  # one key object per encoder and (device, dtype): hashed once
        if cache.identity is None:
            cache.identity = table_identity(enc)
        key = cache.keys[local] = _Key((cache.identity, *local))
    have = SHARED.get(key)
    if have is not None and 0 < end <= have[0].shape[-2]:  # the decode step's path
        return have
    if (end <= 0 or enc._seq_len_dependence()[0] != "none"
            or not type(enc)._table_use.offset_rows):
        return None
    itemsize = ctx.xp.finfo(cdt).bits // 8
    half = enc._table_width()
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
        SHARED.put(key, table, 2 * n * half * itemsize)
    return table


def kept_rows(cache: TableCache, tables: Tables) -> bool:
    """Whether ``tables`` are the rows :func:`table_rows` or :func:`gather_rows` kept last:
    cacheable then, known without asking the framework again."""
    last_rows, last_ids = cache.last_rows, cache.last_ids
    return ((last_rows is not None and last_rows[5] is tables)
            or (last_ids is not None and last_ids[5] is tables))


def table_rows(enc: RotaryEncoder, offset: int, seq: int, *, ctx: Ctx, cdt: Any,
               eager: bool = False) -> Tables | None:
    """Rows ``offset .. offset+seq-1`` of :func:`position_table` (views), or None. ``eager``:
    the caller knows that no trace stages the slicing (its views are then cacheable: the
    table is, and a view taken in torch's inference mode is no inference tensor)."""
    if offset < 0:
        return None
    cache, generation = enc._table_cache, SHARED.generation
    last = cache.last_rows
    # dtypes by identity (each framework's are singletons): one encoder may serve two
    # frameworks, and array-api-strict warns when its dtypes are compared with NumPy's
    if (last is not None and last[0] == offset and last[1] == seq and last[2] is cdt
            and last[3] == ctx.device and last[4] == generation and last[6] is ctx.wide):
        return last[5]  # type: ignore[no-any-return]
    end, kept = offset + seq, cache.last_table
    if (kept is not None and kept[0] is cdt and kept[1] == ctx.device and kept[2] == generation
            and end <= kept[3] and kept[5] is ctx.wide):
        cos, sin = kept[4]  # the table the last rows came from (the decode step's path)
    else:
        table = position_table(enc, end, ctx=ctx, cdt=cdt)
        if table is None:
            return None
        cos, sin = table
        kept = None
    rows = cos[..., offset:end, :], sin[..., offset:end, :]
    # not a tracer (slicing inside jax.jit stages)
    if (eager and kept is not None) or _delegation.cacheable(rows[0], ctx=ctx):
        cache.last_rows = (offset, seq, cdt, ctx.device, generation, rows, ctx.wide)
        if kept is None:
            cache.last_table = (cdt, ctx.device, generation, cos.shape[-2], (cos, sin), ctx.wide)
    return rows
