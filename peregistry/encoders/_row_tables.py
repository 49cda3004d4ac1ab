"""Tables of rows kept across eager calls, for encoders whose output at an integer index is a row
computed elementwise from it: ``sinusoidal`` at a position, ``transformer-xl`` at a distance
``q - k``. A call whose indices fall in a kept table's reach gathers its rows instead of
computing them: the same bits, since each row is what computing its index alone gives (the
angles, sines and cosines are elementwise) and a cast to the output dtype commutes with the
gather. The tables live in the process's cache of rotary position tables (its byte budget,
least recently used first out, :func:`peregistry.rope.clear_caches`); only in eager mode, on
arrays whose values are read without a device synchronization, and not on JAX, where each
eager gather dispatches a program of its own while the computation runs as one. The relative
encoders also keep what they derive from short query and key positions alone (buckets or row
offsets, table rows, distances), by the differences ``k - q`` of their values
(:func:`kept_pairs`, which pauses when nothing it kept serves a call), and serve a decoder's
step (one query against consecutive keys) from a slice: of a vector per distance
(:func:`step_window`), or a copy of one of a table of rows per distance (:func:`step_rows`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any

from .. import _lazy
from ..rope._table_cache import SHARED, _Key, device_key
from ._constants import eager_constant
from ._pair_ops import size_of

if TYPE_CHECKING:
    from ..rope import _delegation
    from .base import Ctx, Encoder
else:  # imported by the first call that needs it (peregistry/_lazy.py)
    _delegation = _lazy.delegation(globals())

__all__ = ["PAIRS_KEPT", "PAIRS_SKIPPED", "PAIRS_SKIPPED_MOST", "PAIR_SIDE", "ROW_TABLE_BYTES",
           "STEP_REACH", "index_bounds", "int_range", "kept_pairs", "kept_rows", "pair_bounds",
           "pair_operand", "pair_reach", "pair_values", "step_entries", "step_magnitudes",
           "step_rows", "step_window"]

#: The largest table kept per encoder, device and dtype (larger reaches are computed).
ROW_TABLE_BYTES = 32 << 20
#: The most positions per side whose values :func:`pair_values` reads (64 x 64 pairs).
PAIR_SIDE = 64
#: The arrays :func:`kept_pairs` keeps per encoder (all dropped when full): at most 4096
#: elements each, so a few MiB at most.
PAIRS_KEPT = 16

#: The calls :func:`kept_pairs` neither looks up nor keeps after :data:`PAIRS_KEPT` arrays were
#: kept and dropped without serving a call (positions of new differences on every call); each
#: further such set doubles the pause, up to :data:`PAIRS_SKIPPED_MOST` calls.
PAIRS_SKIPPED = 64
PAIRS_SKIPPED_MOST = 4096

#: The distances ``|k - q|`` of a decode step that the vectors of :func:`step_entries` and
#: :func:`step_magnitudes` and the tables of :func:`step_rows` cover (8193 entries or rows).
STEP_REACH = 4096

#: Query and key positions, as read by :func:`pair_values`.
PairValues = tuple[tuple[int, ...], tuple[int, ...]]


def int_range(a: Any, *, ctx: Ctx) -> tuple[int, int] | None:
    """``(min, max)`` of a non-empty integer array as Python ints; None if it is empty, a
    tracer's, or on a device where reading values would synchronize it."""
    if ctx.backend.is_tracing(a) or size_of(a) == 0:
        return None
    if not _delegation.reads_cheaply(a, xp=ctx.xp):
        return None
    return _delegation.int_bounds(a, ctx=ctx)


def index_bounds(a: Any, *, ctx: Ctx) -> tuple[int, int] | None:
    """:func:`int_range` of ``a`` where rows may serve it: an int32/int64 array, not on JAX."""
    xp = ctx.xp
    if a.dtype not in (xp.int32, xp.int64) or not _delegation.rows_pay_off(xp):
        return None
    return int_range(a, ctx=ctx)


def kept_rows(enc: Encoder, name: str, idx: Any, *, bounds: tuple[int, int], width: int,
              ctx: Ctx, dtype: Any, build: Callable[[Any], Any],
              centered: bool = False) -> Any | None:
    """The rows of ``enc``'s kept table ``name`` of ``dtype`` at integer ``idx`` (of
    ``bounds``, read by :func:`index_bounds`), each ``(width,)``: ``(*idx.shape, width)``.
    Row ``j`` of a table of ``n`` rows is ``build(i)[j]`` for ``i = arange(n)``; if
    ``centered`` (distances), for ``i = [0 .. n/2 - 1, -n/2 .. -1]``, so that a negative index
    reads its row counting from the end (:func:`~peregistry.rope._delegation.take_wrapped`).
    The table is made, or grown to the next power of two of rows, on first need.

    None, and the caller computes: if the table, or its computation in the wide dtype, would
    take more than :data:`ROW_TABLE_BYTES` or the shared cache's budget; if ``idx`` is 0-d
    (torch would index with it as with an int, a view of the table); if ``idx`` is negative
    and the table not centered; or if its rows could not be kept (a trace, a torch inference
    tensor)."""
    lo, hi = bounds
    if (lo < 0 and not centered) or idx.ndim == 0:
        return None
    need = 2 * max(hi + 1, -lo) if centered else hi + 1
    key = _Key((("rows", name, type(enc), enc), device_key(ctx.device), dtype, ctx.wide))
    have = SHARED.get(key)
    table = None if have is None else have[0]
    if table is None or table.shape[0] < need:
        xp, n = ctx.xp, 1 << max(10, (need - 1).bit_length())

        def make() -> Any:
            i = xp.arange(n, dtype=_delegation.wide_int(xp), device=ctx.device)
            return build((i + n // 2) % n - n // 2 if centered else i)

        table = _make_table(key, rows=n, width=width, ctx=ctx, dtype=dtype, make=make)
        if table is None:
            return None
    if centered:
        return _delegation.take_wrapped(table, idx, ctx=ctx)
    return ctx.backend.take(table, idx, axis=0)


def _make_table(key: _Key, *, rows: int, width: int, ctx: Ctx, dtype: Any,
                make: Callable[[], Any]) -> Any | None:
    """``make()`` (``rows`` rows of ``width``, computed in the wide dtype) cast to ``dtype``
    and kept in the shared cache under ``key``. None, and the caller computes, where the
    table or its computation would take more than :data:`ROW_TABLE_BYTES` or the cache's
    budget (0: tables off), or it could not be kept (a trace, a torch inference tensor)."""
    xp = ctx.xp
    nbytes = rows * width * (xp.finfo(dtype).bits // 8)
    built = rows * width * (xp.finfo(ctx.wide).bits // 8)
    if max(nbytes, built) > min(ROW_TABLE_BYTES, SHARED.budget):
        return None
    with _delegation.cache_scope(xp):
        table = make()
        if table.dtype != dtype:
            table = xp.astype(table, dtype)
    if not _delegation.cacheable(table, ctx=ctx):
        return None
    SHARED.put(key, (table, None), nbytes)
    return table


def pair_values(q: Any, k: Any, *, ctx: Ctx) -> PairValues | None:
    """The values of eager 1-D integer query and key positions of at most :data:`PAIR_SIDE`
    each, where reading them on the host costs less than one small operation (NumPy, CPU torch:
    :func:`~peregistry.rope._delegation.short_ints`); None where they are not read."""
    qv = _delegation.short_ints(q, ctx=ctx, limit=PAIR_SIDE)
    if qv is None:
        return None
    kv = qv if k is q else _delegation.short_ints(k, ctx=ctx, limit=PAIR_SIDE)
    return None if kv is None else (qv, kv)


def _differences(values: PairValues) -> PairValues:
    """``values`` less the first query position: the differences ``k_j - q_i``, all a relative
    encoder depends on, and nothing else (a sliding window gives the same every step)."""
    qv, kv = values
    s = qv[0]
    if not s:
        return values
    return tuple([v - s for v in qv]), tuple([v - s for v in kv])


def _step_start(values: PairValues) -> int | None:
    """Where ``values`` are one query position against ``K`` consecutive keys at distances
    ``k - q = s .. s + K - 1`` within ``STEP_REACH``: the index ``STEP_REACH + s`` of the first
    in a vector of the distances ``-STEP_REACH .. STEP_REACH``; None for other positions."""
    qv, kv = values
    n, first = len(kv), kv[0]
    if len(qv) != 1 or kv[-1] - first != n - 1 or kv != tuple(range(first, first + n)):
        return None
    start = STEP_REACH + first - qv[0]
    return None if start < 0 or start + n > 2 * STEP_REACH + 1 else start


def step_rows(enc: Encoder, name: str, values: PairValues, *, width: int, ctx: Ctx,
              dtype: Any, build: Callable[[Any], Any], like: Any) -> Any | None:
    """A decode step's rows ``(1, K, width)`` of ``dtype`` (the one query against consecutive
    keys): a copy of a slice of a table with one row per distance ``d = k - q`` in ``[-r, r]``,
    row ``r + d`` being ``build(d)``'s (elementwise in ``d``: the bits of computing), kept in
    the shared cache as :func:`kept_rows` keeps its tables; ``r`` is 1024, or the next power of
    two the step reaches (at most :data:`STEP_REACH`), grown on first need. None for other
    positions, inside a trace (``like``, an input, says), or where the table would take more
    than :data:`ROW_TABLE_BYTES` or the cache's budget."""
    start = _step_start(values)
    if start is None or ctx.backend.is_tracing(like):
        return None
    n = len(values[1])
    reach = max(STEP_REACH - start, start + n - 1 - STEP_REACH)  # the farthest |k - q|
    key = _Key((("step rows", name, type(enc), enc), device_key(ctx.device), dtype, ctx.wide))
    have = SHARED.get(key)
    table = None if have is None else have[0]
    if table is None or table.shape[1] // 2 < reach:
        xp, r = ctx.xp, 1 << max(10, (reach - 1).bit_length())

        def make() -> Any:
            d = xp.arange(-r, r + 1, dtype=_delegation.wide_int(xp), device=ctx.device)
            return xp.reshape(build(d), (1, 2 * r + 1, width))

        table = _make_table(key, rows=2 * r + 1, width=width, ctx=ctx, dtype=dtype, make=make)
        if table is None:
            return None
    first = start - STEP_REACH + table.shape[1] // 2
    return _delegation.fresh_copy(table[:, first:first + n], xp=ctx.xp)


def step_window(enc: Encoder, kind: str, values: PairValues,
                entries: Callable[[], tuple[int, ...]], dtype: Any, *, ctx: Ctx) -> Any | None:
    """A decode step's entries ``(1, K)``: where ``values`` are one query position against
    ``K`` consecutive keys at distances ``k - q = s .. s + K - 1``, a slice (no operation per
    element) of the vector ``entries()`` (entry ``STEP_REACH + d`` for the distance ``d``,
    made by :func:`step_entries` or :func:`step_magnitudes`), kept as a ``(1, 2·STEP_REACH + 1)``
    array of ``dtype`` in ``enc._cache`` (:func:`.eager_constant`: no trace holds positions whose
    values were read); None for other positions or distances beyond the reach."""
    start = _step_start(values)
    if start is None:
        return None
    vector = eager_constant(enc, ("step_arrays", kind), entries, dtype, ctx=ctx, like=None,
                            shape=(1, 2 * STEP_REACH + 1))
    return vector[:, start:start + len(values[1])]


def pair_operand(enc: Encoder, kind: str, values: PairValues | None, *,
                 build: Callable[[], Any], ctx: Ctx,
                 step: Callable[[], tuple[int, ...]] | None = None, dtype: Any = None,
                 extra: Hashable = None) -> Any:
    """What a relative encoder derives from its positions alone (an index or an operand):
    ``build()`` where their values were not read (``values`` None, from :func:`pair_values`);
    for a decode step, a slice of the vector ``step()`` of ``dtype`` (:func:`step_window`)
    where ``step`` is given; else what :func:`kept_pairs` keeps under ``kind`` and ``extra``."""
    if values is None:
        return build()
    if step is not None:
        out = step_window(enc, kind, values, step, dtype, ctx=ctx)
        if out is not None:
            return out
    return kept_pairs(enc, kind, values, ctx=ctx, build=build, extra=extra)


def step_entries(enc: Encoder, name: Hashable, entry: Callable[[int], int]) -> tuple[int, ...]:
    """``entry(d)`` for each distance ``d`` in ``[-STEP_REACH, STEP_REACH]``, a host vector
    for :func:`step_window` made once per encoder (kept as ``enc._cache[name]``)."""
    kept: tuple[int, ...] | None = enc._cache.get(name)
    if kept is None:
        kept = enc._cache[name] = tuple(entry(d) for d in range(-STEP_REACH, STEP_REACH + 1))
    return kept


@functools.cache
def step_magnitudes() -> tuple[int, ...]:
    """The host vector for :func:`step_window` of ALiBi: ``-|d|`` for ``d = k - q`` in
    ``[-STEP_REACH, STEP_REACH]`` (entry ``STEP_REACH + d``)."""
    return tuple(-abs(d) for d in range(-STEP_REACH, STEP_REACH + 1))


def pair_bounds(values: PairValues) -> tuple[int, int]:
    """``(min, max)`` of ``q_i - k_j`` over the positions ``values`` (from :func:`pair_values`)."""
    qv, kv = values
    return min(qv) - max(kv), max(qv) - min(kv)


def pair_reach(values: PairValues) -> int:
    """The largest ``|k_j - q_i|`` of the positions ``values`` (from :func:`pair_values`)."""
    qv, kv = values
    if qv is kv:  # (a self-attention's positions: one array, read once)
        return max(qv) - min(qv)
    return max(max(qv) - min(kv), max(kv) - min(qv))


def kept_pairs(enc: Encoder, kind: str, values: PairValues, *, ctx: Ctx, build: Callable[[], Any],
               extra: Hashable = None) -> Any:
    """``build()``, an array that must depend only on the differences of the positions
    ``values`` (from :func:`pair_values`), the backend, the device and ``extra`` (a dtype,
    say): kept in ``enc``'s cache under all of them with ``kind``, and returned by later calls
    with the same ones instead of building again. A model asks for the bias of the same
    positions on every layer and step: this skips the distances, clipping and buckets, leaving
    the gather of the learned values (which change). Callers never hand out what is kept (it
    is an index or an operand). At most :data:`PAIRS_KEPT` per encoder, all dropped when full;
    when a full set served no call (new differences on every call), the next
    :data:`PAIRS_SKIPPED` calls build without looking up or keeping (~3 µs each on torch),
    twice as many after each further such set (at most :data:`PAIRS_SKIPPED_MOST`), and again
    :data:`PAIRS_SKIPPED` after a set that served a call.
    Like the tables of positions, nothing is kept with their budget at 0, and
    :func:`peregistry.rope.clear_caches` (or any table leaving the shared cache) ends what is
    kept (the key holds the shared cache's generation); nothing made inside a torch.func
    transform is kept."""
    state = enc._cache.get("pairs_state")  # [hits since cleared, calls to skip, last pause]
    if state is None:
        state = enc._cache["pairs_state"] = [0, 0, 0]
    elif state[1] > 0:  # new differences on every call of late: neither looked up nor kept
        state[1] -= 1
        return build()
    kept: dict[Hashable, Any] | None = enc._cache.get("pairs")
    if kept is None:
        kept = enc._cache["pairs"] = {}
    key = (kind, ctx.backend.name, device_key(ctx.device), extra, SHARED.generation,
           _differences(values))
    out = kept.get(key)
    if out is not None:
        state[0] += 1
        return out
    with _delegation.cache_scope(ctx.xp):  # (not a torch inference tensor)
        out = build()
    if SHARED.budget and _delegation.cacheable(out, ctx=ctx):
        if len(kept) >= PAIRS_KEPT:
            kept.clear()  # (and if the full set served no call, skip the next calls)
            pause = 0 if state[0] else min(max(2 * state[2], PAIRS_SKIPPED), PAIRS_SKIPPED_MOST)
            state[:] = [0, pause, pause]
        kept[key] = out
    return out
