"""Helpers shared by the pair kinds (``bias``, ``relative-embedding``) and the learned tables.

Everything here is written against the Array API standard and takes ``ctx`` (the caller's
namespace, backend, device) from the public method; nothing looks the namespace up again.

* :func:`pair_batch_shape` — the broadcast of the leading axes of ``(..., Q)`` and ``(..., K)``;
* :func:`distance` — ``k - q`` as an integer ``(..., Q, K)`` array (exact: integer arithmetic in
  the namespace's indexing dtype, so ``uint8`` positions cannot wrap around);
* :func:`gather` — rows of a table at integer indices of any shape (the standard's ``take``
  accepts 1-D indices only: flatten, take, reshape);
* :func:`check_index_range` — positions outside ``[0, n)`` of a learned table: an error naming
  the range in eager mode; under ``jax.jit``/``torch.compile`` (values unknown) the rows of
  out-of-range positions become NaN, on every backend alike;
* :func:`compute_dtype` — float32 or wider: the dtype to do arithmetic in for a given output.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from .base import Encoder, resolve_dtype

if TYPE_CHECKING:
    from .base import Ctx

__all__ = ["LearnedParams", "check_index_range", "compute_dtype", "distance", "gather", "index_dtype",
           "pair_batch_shape", "pair_inputs"]


def pair_inputs(enc: Encoder, q_positions: Any, k_positions: Any,
                params: Any) -> tuple[Ctx, Any, Any, Any, tuple[int, ...]]:
    """The common front of ``bias``/``embed``: one namespace for positions *and* params (so a
    Python list of positions follows torch params), validated positions, validated params and
    the broadcast batch shape."""
    from collections.abc import Mapping

    extra: tuple[Any, ...] = ()
    if isinstance(params, Mapping):
        check_param_arrays(enc.name, params)
        extra = tuple(params.values())
    ctx, arrays = enc._context(q_positions, k_positions, *extra)
    q = enc._positions(arrays[0], ctx, what="q_positions")
    k = enc._positions(arrays[1], ctx, what="k_positions")
    batch = pair_batch_shape(enc.name, q, k)
    prepared = enc._check_params(params, ctx)
    return ctx, q, k, prepared, batch


def check_param_arrays(owner: str, params: Any) -> None:
    """Each value of a params dict must be an array (not a list or number)."""
    from collections.abc import Mapping

    if not isinstance(params, Mapping):
        return
    for key, v in params.items():
        if not hasattr(v, "shape") or not hasattr(v, "dtype"):
            raise TypeError(f"{owner}: params[{key!r}] must be an array (from enc.init(xp)), got "
                            f"{type(v).__module__}.{type(v).__qualname__}")


def params_backend_matches(owner: str, params: Any, ctx: Ctx) -> None:
    """Params must be arrays of the positions' framework (no silent host round trips)."""
    from collections.abc import Mapping

    from ..registry import default_registry

    if not isinstance(params, Mapping):
        return
    check_param_arrays(owner, params)
    for key, v in params.items():
        b = default_registry.backend_of(v)
        if b is not ctx.backend:
            got = b.name if b is not None else type(v).__qualname__
            raise TypeError(
                f"{owner}: params[{key!r}] is a {got} array but the positions are "
                f"{ctx.backend.name}; pass positions and params of one framework "
                f"(peregistry.convert(params, xp) moves params)"
            )


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
    """The namespace's default indexing dtype (int64; int32 on JAX without x64)."""
    info = ctx.xp.__array_namespace_info__()
    return info.default_dtypes(device=ctx.device)["indexing"]


def as_index(positions: Any, ctx: Ctx) -> Any:
    dt = index_dtype(ctx)
    return positions if positions.dtype == dt else ctx.xp.astype(positions, dt)


def distance(q: Any, k: Any, *, ctx: Ctx) -> Any:
    """``k - q`` of shape ``(*batch, Q, K)``: ``d[..., i, j] = k[..., j] - q[..., i]``."""
    xp = ctx.xp
    qi, ki = as_index(q, ctx), as_index(k, ctx)
    return xp.expand_dims(ki, axis=-2) - xp.expand_dims(qi, axis=-1)


def gather(table: Any, idx: Any, *, axis: int, ctx: Ctx) -> Any:
    """``table`` indexed along ``axis`` (0 or 1 of a 2-D table) by integer ``idx`` of any shape.

    ``axis=0``: ``(n, c)`` → ``(*idx.shape, c)``; ``axis=1``: ``(c, n)`` → ``(c, *idx.shape)``.
    """
    return ctx.backend.take(table, idx, axis=axis)


def _size(a: Any) -> int:
    n = 1
    for d in a.shape:
        n *= int(d)
    return n


def check_index_range(owner: str, idx: Any, n: int, *, what: str, option: str,
                      ctx: Ctx) -> tuple[Any, Any | None]:
    """Validate integer indices against ``[0, n)``.

    Returns ``(safe_idx, invalid)``: in eager mode ``invalid`` is None and a position outside the
    range is a ``ValueError`` naming the range and the offending values. While tracing
    (``jax.jit``, ``torch.compile``: values unknown on the host) ``safe_idx`` has the bad entries
    replaced by 0 and ``invalid`` is the boolean mask the caller turns into NaN rows
    (:func:`nan_where`), so out-of-range positions are never silently clamped or wrapped.
    """
    xp = ctx.xp
    if not ctx.backend.is_tracing(idx):
        if _size(idx):
            lo, hi = int(xp.min(idx)), int(xp.max(idx))
            if lo < 0 or hi >= n:
                raise ValueError(
                    f"{owner}: {what} must be in [0, {n}) ({option}={n}), got values from {lo} "
                    f"to {hi}; resize the table (enc.resize) for longer inputs"
                )
        return idx, None
    invalid = (idx < 0) | (idx >= n)
    return xp.where(invalid, xp.zeros_like(idx), idx), invalid


def nan_where(invalid: Any | None, out: Any, *, ctx: Ctx) -> Any:
    """``out`` with the rows (last axis) of ``invalid`` positions set to NaN."""
    if invalid is None:
        return out
    xp = ctx.xp
    nan = xp.asarray(math.nan, dtype=out.dtype, device=ctx.device)
    return xp.where(xp.expand_dims(invalid, axis=-1), nan, out)


def compute_dtype(out_dtype: Any, ctx: Ctx) -> Any:
    """``out_dtype`` if it is float32 or wider, else float32: arithmetic never runs in half
    precision, and a float32 result is computed in float32 (one rounding per operation)."""
    xp = ctx.xp
    return out_dtype if xp.finfo(out_dtype).bits >= 32 else xp.float32


def linear_resize_plan(n_in: int, n_out: int, *,
                       align_corners: bool) -> tuple[list[int], list[int], list[float]]:
    """Source indices and weights of 1-D linear interpolation from ``n_in`` to ``n_out`` samples,
    with the conventions of ``torch.nn.functional.interpolate(mode="linear")``:
    ``align_corners=False`` maps output ``i`` to ``src = (i + 0.5)·n_in/n_out - 0.5`` (clamped
    at 0), ``align_corners=True`` to ``src = i·(n_in - 1)/(n_out - 1)``. Returns ``(i0, i1, w)``
    with ``out[i] = (1 - w)·t[i0] + w·t[i1]``."""
    i0, i1, w = [], [], []
    for i in range(n_out):
        if align_corners:
            src = i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        else:
            src = max((i + 0.5) * (n_in / n_out) - 0.5, 0.0)
        a = min(math.floor(src), n_in - 1)
        i0.append(a)
        i1.append(min(a + 1, n_in - 1))
        w.append(src - a)
    return i0, i1, w


def linear_resize(table: Any, n_out: int, *, align_corners: bool, ctx: Ctx) -> Any:
    """Rows of a ``(n, c)`` table linearly interpolated to ``(n_out, c)``, computed in
    ``ctx.wide`` and returned in the table's dtype (differentiable: two gathers and a blend)."""
    xp = ctx.xp
    i0, i1, w = linear_resize_plan(int(table.shape[0]), n_out, align_corners=align_corners)
    t = xp.astype(table, ctx.wide) if table.dtype != ctx.wide else table
    idt = index_dtype(ctx)
    a = xp.take(t, ctx.constant(i0, idt), axis=0)
    b = xp.take(t, ctx.constant(i1, idt), axis=0)
    wt = xp.expand_dims(ctx.constant(w), axis=-1)
    out = a * (1.0 - wt) + b * wt
    return out if out.dtype == table.dtype else xp.astype(out, table.dtype)


class LearnedParams(Encoder):
    """Mixin of the built-in learned encoders: float32-exact initial values, and params
    checked to be real floating arrays of the positions' framework.

    ``init`` draws with NumPy's PCG64 (as :meth:`Encoder.init`) and rounds to float32, so one
    seed gives the *same numbers* on every backend and in every dtype of at least float32
    (JAX without x64 included); narrower dtypes get those values rounded once more.
    """

    __slots__ = ()

    def init(self, xp: Any, *, seed: int = 0, dtype: Any = None,
             device: Any = None) -> dict[str, Any]:
        from ..registry import default_registry

        backend = default_registry.backend_of_namespace(xp)
        out_dtype = resolve_dtype(self.name, backend, dtype, device)
        f32 = backend.float_dtypes()["float32"]
        params = super().init(xp, seed=seed, dtype=f32, device=device)
        ns = backend.namespace()
        return {k: v if v.dtype == out_dtype else ns.astype(v, out_dtype)
                for k, v in params.items()}

    def _check_params(self, params: Any, ctx: Ctx) -> Any:
        check_param_arrays(self.name, params)
        out = super()._check_params(params, ctx)
        params_backend_matches(self.name, out, ctx)
        for key, v in out.items():
            if not ctx.xp.isdtype(v.dtype, "real floating"):
                raise TypeError(f"{self.name}: params[{key!r}] must have a real floating "
                                f"dtype, got {v.dtype}")
        return out
