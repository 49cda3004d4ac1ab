"""Host constants (frequencies, slopes, lookup tables) as arrays, made once per backend, device
and dtype in eager mode and kept on the encoder: turning a Python list into an array costs more
than the rest of a small call. Never kept from inside a trace, nor as a torch inference tensor."""

from __future__ import annotations

import contextlib
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from .. import _lazy

if TYPE_CHECKING:
    from ..rope import _delegation
    from .base import Encoder
    from .context import Ctx
else:  # the framework dispatch, imported by the first call (peregistry/_lazy.py)
    _delegation = _lazy.delegation(globals())

__all__ = ["eager_constant"]


def eager_constant(enc: Encoder, name: Hashable, values: Any, dtype: Any, *, ctx: Ctx,
                   like: Any, shape: tuple[int, ...] | None = None) -> Any:
    """The host constant ``values`` (a tuple of numbers, or a function making it, called only
    when the array is made) as an array of ``dtype`` on the inputs' device, reshaped to
    ``shape`` if given: made once per backend, device and dtype in eager mode
    and kept in ``enc._cache[name]`` (a list turned into an array costs more than the rest of a
    small call), never cached from inside a trace (``like``, an input of the call, says; None
    where the caller read the inputs' values, so that no trace holds them) nor as a torch
    inference tensor (autograd may save it); at most 8 kept per constant."""
    if like is not None and ctx.backend.is_tracing(like):
        out = ctx.constant(list(values() if callable(values) else values), dtype)
        return out if shape is None else ctx.xp.reshape(out, shape)
    arrays: dict[Any, Any] = enc._cache.setdefault(name, {})
    key = (ctx.backend.name, ctx.device, dtype)
    try:
        return arrays[key]
    except (KeyError, TypeError):  # new, or an unhashable device
        pass
    with _delegation.cache_scope(ctx.xp):
        out = ctx.constant(list(values() if callable(values) else values), dtype)
        if shape is not None:
            out = ctx.xp.reshape(out, shape)
    if len(arrays) < 8 and _delegation.cacheable(out, ctx=ctx):
        with contextlib.suppress(TypeError):
            arrays[key] = out
    return out
