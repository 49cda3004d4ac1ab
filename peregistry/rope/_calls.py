"""Eager ``rotate`` calls, remembered (issue 17: the fixed cost of small calls).

A model rotates the q and k of every layer at every decoding step, with arguments that differ
from the previous step's only in their values. Each rotary encoder keeps its last validated
eager calls twice over, newest first, each memory one tuple replaced whole (no lock):

* **the same call** (:func:`recall`, first): ``x`` of a kept call's class, dtype, shape and
  device (or k after q: fewer heads) at the *same* positions object, unchanged by the
  framework's values token, or the same int offset: validation and the table lookup are
  skipped (q and k of every layer after the first).
* **the same signature**: positions of a kept call's class, dtype, shape and device (any
  values, any object; NumPy arrays too) or another int offset, with ``x`` as above: validation,
  which reads none of the positions' values, is skipped; the tables are looked up or computed
  for the new values (layer 0's q at every new decoding step). An int offset is still checked
  against the integer range, which depends on its value.

Neither is kept from, nor read inside, a trace; neither serves a call with ``params`` or with
Python sequences as positions; the signature memory serves no subclass that overrides a
validation method (a plugin checking positions' values sees every call). ``clear_caches()``
and any table evicted from the shared cache end both; a switched JAX x64 flag (another wide
dtype) is a miss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import _lazy
from ..encoders.context import own_methods
from ._rows import one_row
from ._table_cache import SHARED, Tables, kept_rows

if TYPE_CHECKING:
    from ..backends import Backend
    from ..encoders.base import Ctx
    from . import _delegation
    from .encoder import RotaryEncoder
else:  # imported by the first call that needs it (peregistry/_lazy.py)
    _delegation = _lazy.delegation(globals())

__all__ = ["CALLS_KEPT", "Call", "recall", "remember"]

#: How many eager ``rotate`` calls an encoder keeps in each memory (q and k of a layer, spares).
CALLS_KEPT = 4

_UNKNOWN: Any = object()  # remember(): the token reader is still to be looked up

#: The methods that validate a ``rotate`` call: a subclass overriding one must see every call.
_VALIDATION = ("_rotate_call", "_context", "_positions", "_check_params", "_check_seq_len",
               "_check_offset_range")


@dataclass(slots=True)
class Call:
    """One validated :meth:`RotaryEncoder.rotate` call."""

    ctx: Ctx
    x: Any
    positions: Any  # validated positions, or None for ``offset + arange(seq)``
    offset: Any  # a Python int or an array
    seq_len: int | None
    tracing: bool
    cdt: Any  # the dtype the rotation runs in
    #: ``(rotary_dim, interleaved, rotary features last)`` of the encoder, once known
    spec: tuple[int, bool, bool] | None = None


def _same_rotation_shape(shape: tuple[int, ...], seen: tuple[int, ...],
                         table: tuple[int, ...]) -> bool:
    """Whether ``x`` of ``shape`` rotates by the tables of a validated call with ``x`` of shape
    ``seen``: the same shape, or (k after q, fewer heads) the same rank, sequence and head dim
    (all the validation and the tables read of ``x``) with the tables broadcasting into it."""
    if shape == seen:
        return True
    if len(shape) != len(seen) or len(shape) < 2 or shape[-2:] != seen[-2:]:
        return False
    batch = tuple(table[:-1])
    if len(batch) > len(shape) - 1:
        return False
    # broadcasts_into(batch, shape[:-1]) without its generator's frames: every k after q
    for n, m in zip(reversed(batch), reversed(shape[:-1]), strict=False):  # noqa: SIM110
        if n != 1 and n != m:
            return False
    return True


def recall(enc: RotaryEncoder, x: Any, positions: Any, offset: Any,
           seq_len: int | None) -> tuple[Call, Tables | None] | None:
    """This call, validated already by a kept one: ``(kept call, tables)`` for the same call
    (the kept call's ``x`` is None: rotate this call's), ``(call, rows)`` for a decode step's
    one position of a kept signature, ``(call, None)`` for the same signature otherwise (its
    tables still to be found); None otherwise, and always inside a trace (checked first: a
    tracer must not read the memories)."""
    if type(offset) is not int:
        return None
    backend = enc._services.backend_of(x)
    if backend is None or backend.is_tracing(x):  # before any memory is read (Dynamo guards)
        return None
    cache = enc._table_cache
    shape, generation = tuple(x.shape), SHARED.generation
    for pos, off, xtype, dtype, xshape, device, token, reader, sl, gen, tables, call in (
            cache.last_calls):
        if (positions is not pos or offset != off or type(x) is not xtype or x.dtype != dtype
                or sl != seq_len or gen != generation
                or (shape != xshape
                    and not _same_rotation_shape(shape, xshape, tables[0].shape))):
            continue
        if pos is not None and reader(pos) != token:
            break  # written in place since: validated still, but new tables
        if backend.placement(x) != device or backend.wide_float_dtype(device) is not call.ctx.wide:
            continue  # (the wide dtype: JAX's x64 flag, switched since)
        return call, tables
    return _signature_call(enc, backend, x, shape, positions, offset, seq_len)


def _signature_call(enc: RotaryEncoder, backend: Backend, x: Any, shape: tuple[int, ...],
                    positions: Any, offset: int,
                    seq_len: int | None) -> tuple[Call, Tables | None] | None:
    kept = enc._table_cache.signatures
    if not kept or not (seq_len is None or type(seq_len) is int):
        return None
    if positions is None:
        psig: tuple[Any, ...] | None = None
    elif (offset != 0 or enc._services.backend_of(positions) is not backend
          or backend.is_tracing(positions)):
        return None  # (a Python sequence: validated, and made an array, every time)
    else:
        psig = (type(positions), positions.dtype, tuple(positions.shape))
    generation = SHARED.generation
    for xtype, dtype, xshape, sig, sl, gen, ctx, cdt, spec, row, reader in kept:
        if (type(x) is not xtype or x.dtype != dtype or shape != xshape or sig != psig
                or sl != seq_len or gen != generation):
            continue
        device = ctx.device
        if (backend.placement(x) != device
                or (positions is not None and backend.placement(positions) != device)
                or backend.wide_float_dtype(device) != ctx.wide):  # JAX's x64 flag
            return None
        if positions is None:  # the one check that reads a value: the offset's range
            enc._check_offset_range(offset, shape[-2], ctx, tracing=False)
        call = Call(ctx, x, positions, offset, seq_len, False, cdt, spec)
        if row:  # one position that read a row of the position table before: read its row
            rows = one_row(enc, positions, ctx=ctx, cdt=cdt)
            if rows is not None:
                remember(enc, positions, offset, seq_len, call=call, tables=rows, validated=False,
                         reader=reader)
                return call, rows
        return call, None
    return None


def remember(enc: RotaryEncoder, positions: Any, offset: Any, seq_len: int | None, *,
             call: Call, tables: Tables, validated: bool, reader: Any = _UNKNOWN,
             recalled: bool = False) -> None:
    """Keep what an eager ``rotate`` call was, for :func:`recall`: its tables by the positions
    object and its values token or the int offset (not for positions that can change unseen:
    NumPy arrays, Python sequences; nor torch inference tensors); and, if ``validated`` now
    (by the full path), its signature (the class, dtype, shape and device of ``x`` and of the
    positions, or an int offset; ``seq_len``) with the :class:`~..encoders.base.Ctx` and dtype
    validation found. ``reader``: the positions' :func:`._delegation.token_reader`, if known.
    ``recalled``: the call came by a kept signature that read no row; if it read one now, the
    signature says so from now on (a decode of text tokens after an image token's)."""
    ctx = call.ctx
    if reader is _UNKNOWN:
        reader = _delegation.token_reader(ctx.xp)
    if call.tracing or type(offset) is not int:
        return
    if validated and positions is not None and (
            offset != 0 or ctx.backend.is_tracing(positions)
            or enc._services.backend_of(positions) is not ctx.backend):
        return  # a Python sequence, or made an array of another backend (a recalled call's
        # positions are an array of x's backend, not traced: recall checked)
    x, cache, generation = call.x, enc._table_cache, SHARED.generation
    if (validated and own_methods(type(enc), _VALIDATION)) or recalled:
        psig = (None if positions is None
                else (type(positions), positions.dtype, tuple(positions.shape)))
        # A decode step's one token, served by a row of the position table (whose checks of
        # the positions' dtype, shape and device this signature passed): the next such call
        # reads its row directly.
        last = cache.last_rows
        row = (psig is not None and len(psig[2]) > 0 and last is not None and last[5] is tables
               and last[1] == 1)
        if validated or row:
            key = (type(x), x.dtype, tuple(x.shape), psig, seq_len)
            entry = (*key, generation, ctx, call.cdt, call.spec, row, reader)
            others = tuple(e for e in cache.signatures if e[:5] != key)
            cache.signatures = (entry, *others[:CALLS_KEPT - 1])
    if not (kept_rows(cache, tables) or _delegation.cacheable(tables[0], ctx=ctx)):
        return
    token = None
    if positions is not None:
        token = None if reader is None else reader(positions)
        if token is None:
            return
    # the call without its x, which may hold a graph (and is not the next call's x)
    bare = Call(ctx, None, positions, offset, seq_len, False, call.cdt, call.spec)
    kept = (positions, offset, type(x), x.dtype, tuple(x.shape), ctx.device, token, reader,
            seq_len, generation, tables, bare)
    cache.last_calls = (kept, *cache.last_calls[:CALLS_KEPT - 1])
