"""Building blocks of the pair kinds (``bias``, ``relative-embedding``): what an encoder of
``k - q`` needs, written against the Array API standard. Each takes ``ctx`` (the caller's
namespace, backend, device) from the public method and never looks the namespace up again.

* :func:`distance` — ``k - q`` as an integer ``(..., Q, K)`` array (exact: integer arithmetic in
  the namespace's indexing dtype, so ``uint8`` positions cannot wrap around);
* :func:`gather` — rows of a table at integer indices of any shape (the standard's ``take``
  accepts 1-D indices only);
* :func:`index_dtype` — the namespace's indexing dtype;
* :func:`compute_dtype` — float32 or wider: the dtype to do arithmetic in for a given output;
* :func:`pair_batch_shape`, :func:`check_param_arrays` — the broadcast of ``(..., Q)`` and
  ``(..., K)``, and params that are arrays (the checks of the kinds' common front,
  :meth:`peregistry.kinds.base.PairEncoder._pair_inputs`, defined there).

Plugin authors import them from :mod:`peregistry.plugin`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..kinds._params import check_param_arrays
from ..kinds.context import compute_float, pair_batch_shape

if TYPE_CHECKING:
    from ..backends._base import Ctx

__all__ = ["check_param_arrays", "clip_distance", "compute_dtype", "distance", "gather",
           "index_dtype", "pair_batch_shape"]


def index_dtype(ctx: Ctx) -> Any:
    """The namespace's default indexing dtype (int64; int32 on JAX without x64), as the
    backend adapter answers it (``ctx.index`` when the adapter gave it with the context)."""
    return ctx.index if ctx.index is not None else ctx.backend.index_dtype(ctx.device)


def distance(q: Any, k: Any, *, ctx: Ctx) -> Any:
    """``k - q`` of shape ``(*batch, Q, K)``: ``d[..., i, j] = k[..., j] - q[..., i]``, in the
    indexing dtype (widened first: narrow positions cannot wrap around)."""
    idt, xp = ctx.index, ctx.xp
    if idt is None:  # (an adapter that did not give it with the context)
        idt = ctx.backend.index_dtype(ctx.device)
    qi = q if q.dtype == idt else xp.astype(q, idt)
    ki = k if k.dtype == idt else xp.astype(k, idt)
    return ki[..., None, :] - qi[..., :, None]  # indexing adds the axes (cheaper than expand_dims)


def clip_distance(d: Any, low: int, high: int, *, ctx: Ctx) -> Any:
    """``clip(d, low, high)`` of an integer array ``d`` (a :func:`distance`) by Python ints, in
    ``d``'s dtype, as Shaw et al. 2018 clip ``k - q`` to ``[-m, m]``. Use it rather than
    ``xp.clip``: array-api-compat's torch ``clip`` asks ``math.isnan`` of its bounds, which
    ``torch.compile(dynamic=True)`` cannot trace (the conformance suite compiles so)."""
    from ..rope._delegation import clip_int  # (the one dispatch to framework functions)

    return clip_int(d, low, high, xp=ctx.xp)


def gather(table: Any, idx: Any, *, axis: int, ctx: Ctx) -> Any:
    """``table`` indexed along ``axis`` (0 or 1 of a 2-D table) by integer ``idx`` of any shape.

    ``axis=0``: ``(n, c)`` → ``(*idx.shape, c)``; ``axis=1``: ``(c, n)`` → ``(c, *idx.shape)``.
    """
    return ctx.backend.take(table, idx, axis=axis)


def compute_dtype(out_dtype: Any, ctx: Ctx) -> Any:
    """``out_dtype`` if it is float32 or wider, else float32: arithmetic never runs in half
    precision, and a float32 result is computed in float32 (one rounding per operation);
    another byte order's float64 in the native float64 (:func:`.context.compute_float`)."""
    return compute_float(out_dtype, ctx.xp)
