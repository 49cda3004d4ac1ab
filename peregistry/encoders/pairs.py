"""Building blocks of the pair kinds (``bias``, ``relative-embedding``): what an encoder of
``k - q`` needs, written against the Array API standard. Each takes ``ctx`` (the caller's
namespace, backend, device) from the public method and never looks the namespace up again.

* :func:`distance` — ``k - q`` as an integer ``(..., Q, K)`` array (exact: integer arithmetic in
  the namespace's indexing dtype, so ``uint8`` positions cannot wrap around);
* :func:`gather` — rows of a table at integer indices of any shape (the standard's ``take``
  accepts 1-D indices only);
* :func:`index_dtype` — the namespace's indexing dtype;
* :func:`compute_dtype` — float32 or wider: the dtype to do arithmetic in for a given output;
* :func:`pair_batch_shape`, :func:`pair_inputs` — the broadcast of ``(..., Q)`` and ``(..., K)``
  and the common front of ``bias``/``embed`` (the base classes call it; plugins need not).

Plugin authors import them from :mod:`peregistry.plugin`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .context import compute_float

if TYPE_CHECKING:
    from .base import Ctx, Encoder

__all__ = ["check_param_arrays", "clip_distance", "compute_dtype", "distance", "gather",
           "index_dtype", "pair_batch_shape", "pair_inputs"]


def pair_inputs(enc: Encoder, q_positions: Any, k_positions: Any,
                params: Any) -> tuple[Ctx, Any, Any, Mapping[str, Any]]:
    """The common front of ``bias``/``embed``: one namespace for positions *and* params (so a
    Python list of positions follows torch params), validated positions (whose leading axes
    broadcast) and validated params."""
    arrays: tuple[Any, ...] = (q_positions, k_positions)
    if params is not None and isinstance(params, Mapping):
        check_param_arrays(enc.name, params)
        arrays += tuple(params.values())
    ctx, got = enc._context(*arrays, names=lambda: (  # (made only for an error message)
        "q_positions", "k_positions", *[f"params[{key!r}]" for key in params or ()]))
    q = enc._positions(got[0], ctx, what="q_positions")
    k = enc._positions(got[1], ctx, what="k_positions")
    if q.ndim != 1 or k.ndim != 1:
        pair_batch_shape(enc.name, q, k)
    return ctx, q, k, enc._check_params(params, ctx)


def check_param_arrays(owner: str, params: Any) -> None:
    """Each value of a params dict must be an array (not a list or number)."""
    if not isinstance(params, Mapping):
        return
    for key, v in params.items():
        if not hasattr(v, "shape") or not hasattr(v, "dtype"):
            raise TypeError(f"{owner}: params[{key!r}] must be an array (from enc.init(xp)), got "
                            f"{type(v).__module__}.{type(v).__qualname__}")


def pair_batch_shape(owner: str, q: Any, k: Any) -> tuple[int, ...]:
    """Broadcast shape of ``q.shape[:-1]`` and ``k.shape[:-1]``; a clear error if they do not
    broadcast or a position array has no sequence axis."""
    for what, a in (("q_positions", q), ("k_positions", k)):
        if len(a.shape) == 0:
            raise ValueError(f"{owner}: {what} is a scalar, but should be (..., Q) / (..., K) "
                             f"with a sequence axis; use e.g. xp.asarray([p])")
    a, b = tuple(q.shape[:-1]), tuple(k.shape[:-1])
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and 1 not in (x, y):
            raise ValueError(
                f"{owner}: leading axes of q_positions {tuple(q.shape)} and k_positions "
                f"{tuple(k.shape)} do not broadcast ({q.shape[:-1]} vs {k.shape[:-1]}); "
                f"positions are (..., Q) and (..., K) with broadcastable '...'"
            )
        out.append(y if x == 1 else x)
    return tuple(out)


def index_dtype(ctx: Ctx) -> Any:
    """The namespace's default indexing dtype (int64; int32 on JAX without x64), as the
    backend adapter answers it."""
    return ctx.backend.index_dtype(ctx.device)


def distance(q: Any, k: Any, *, ctx: Ctx) -> Any:
    """``k - q`` of shape ``(*batch, Q, K)``: ``d[..., i, j] = k[..., j] - q[..., i]``, in the
    indexing dtype (widened first: narrow positions cannot wrap around)."""
    idt, xp = ctx.backend.index_dtype(ctx.device), ctx.xp
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
