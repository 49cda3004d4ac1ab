"""The one place where the rope engine hands a call to a framework's own implementation.

As array-api-extra's ``_delegation.py``: each function asks which namespace it got
(``if is_torch(xp): ...``; the names are declared once, in :mod:`peregistry._namespaces`) and
otherwise calls the generic Array API code of :mod:`._funcs`, which is the reference the fast
paths are tested against (bit for bit). Fast paths never leak into the generic layer or into the
backend adapters, which only hold what the standard lacks.

* :func:`rotate` — the rotation: the rotation kernels of plugins (:mod:`._kernels`), torch's
  blocked / functional / DTensor paths (:mod:`._torch`), NumPy's ufuncs writing into one output
  (:mod:`._numpy`), else :func:`._funcs.apply_rotation`.
* :func:`materialize` — a fusion boundary for a cos/sin table under ``torch.compile`` /
  ``jax.jit``, so the compiler does not recompute its trigonometry for every head.
* :func:`cacheable`, :func:`cache_scope`, :func:`int_bounds`, :func:`reads_cheaply`,
  :func:`rows_pay_off` — the questions asked before an array is kept in the store of tables,
  or its values read on the host.
* :func:`wide_int` — the integer dtype positions ``offset + arange(seq)`` are computed in.
* :func:`take_last` — a gather along the last axis (M-RoPE's position of each pair).
* :func:`clip_int` — ``clip`` of an integer array by Python ints (the pair kinds' distances).

:mod:`._torch`, :mod:`._numpy` and :mod:`._jax` import their framework only inside their
functions, so that importing the engine imports no framework.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

import peregistry.rope._jax as _jax
import peregistry.rope._kernels as _kernels
import peregistry.rope._numpy as _numpy
import peregistry.rope._torch as _torch

from .._jax_eager import is_jax_namespace as _is_jax
from .._jax_eager import is_tracer as _is_tracer
from .._namespaces import NUMPY_NAMES, TORCH_NAMES, is_torch
from ._funcs import Layout, apply_rotation, full_width

if TYPE_CHECKING:
    from ..backends._base import Ctx

__all__ = [
    "cache_scope",
    "cacheable",
    "clip_int",
    "full_width_tables",
    "int_bounds",
    "materialize",
    "read_ints",
    "read_one",
    "reads_cheaply",
    "rotate",
    "rotation",
    "rows_pay_off",
    "take_last",
    "wide_int",
]


#: ``(module, name)`` of the array classes :func:`short_ints` reads: exactly, not subclasses.
_PLAIN_ARRAYS = frozenset({("numpy", "ndarray"), ("torch", "Tensor")})



def rotate(x: Any, cos: Any, sin: Any, *, rotary_dim: int, interleaved: bool, cdt: Any,
           xp: Any, native: bool = True, eager: bool = False) -> Any:
    """Rotate the pairs of ``x`` by half-width tables ``cos``/``sin`` (of dtype ``cdt``, which
    the rotation runs in); the result has ``x``'s dtype. ``native=False`` forces the generic
    rotation (the reference). ``eager``: the caller found ``x`` no tracer (nothing compiles).
    The rotation kernels of plugins are tried first (:mod:`._kernels`)."""
    if native:
        kernels = _kernels.ACTIVE
        if kernels is None:
            kernels = _kernels.active()
        if kernels:
            out = _kernels.rotate(kernels, x, cos, sin, rotary_dim=rotary_dim,
                                  interleaved=interleaved, xp=xp)
            if out is not None:
                return out
    name = getattr(xp, "__name__", None)
    if native and name in TORCH_NAMES:
        return _torch.rotate(x, cos, sin, rotary_dim=rotary_dim, interleaved=interleaved,
                             eager=eager)
    if native and name in NUMPY_NAMES:
        out = _numpy.rotate(x, cos, sin, rotary_dim=rotary_dim, interleaved=interleaved, cdt=cdt)
        if out is not None:
            return out
    if (_is_jax(xp) and cdt in (xp.float32, xp.float64)
            and not any(_is_tracer(a) for a in (x, cos, sin))):
        # Eager: one program per shape instead of one per operation, with the same bits. The
        # cast of a 16-bit result stays outside: XLA:CPU rounds fused conversions to float16
        # differently from its eager convert.
        from .._jax_eager import compiled_call

        out = compiled_call(_rotation_in, x, cos, sin, rotary_dim=rotary_dim,
                            interleaved=interleaved, cdt=cdt, xp=xp)
        return out if out.dtype == x.dtype else xp.astype(out, x.dtype)
    return apply_rotation(x, cos, sin, rotary_dim=rotary_dim, interleaved=interleaved, cdt=cdt,
                          xp=xp)


def rotation(xp: Any) -> Callable[..., Any]:
    """The rotation for tables of namespace ``xp``, chosen once, when
    :class:`~peregistry.rope.RotaryTables` are made (their per-layer call then enters no
    dispatch): torch's rotation itself while no plugin kernel is active, else :func:`rotate`,
    which asks on each call. Both take ``(x, cos, sin, *, rotary_dim, interleaved, cdt, xp)``
    and give the same bits (a kernel registered after the tables were made is used by the next
    tables)."""
    kernels = _kernels.ACTIVE
    if kernels is None:
        kernels = _kernels.active()
    if not kernels and getattr(xp, "__name__", None) in TORCH_NAMES:
        return _torch.rotate
    return rotate


def _rotation_in(x: Any, cos: Any, sin: Any, *, rotary_dim: int, interleaved: bool, cdt: Any,
                 xp: Any) -> Any:
    """:func:`apply_rotation` of ``x`` taken to ``cdt`` (exact: ``cdt`` is at least as wide),
    left in ``cdt``."""
    return apply_rotation(x if x.dtype == cdt else xp.astype(x, cdt), cos, sin,
                          rotary_dim=rotary_dim, interleaved=interleaved, cdt=cdt, xp=xp)


def full_width_tables(cos: Any, sin: Any, *, layout: Layout, dtype: Any,
                      xp: Any) -> tuple[Any, Any]:
    """Half-width tables spread to full width (:func:`._funcs.full_width`) and cast to
    ``dtype``. On eager JAX as one program per shape (not two concatenations and two casts
    dispatched one by one), the cast to a 16-bit dtype left outside as in :func:`rotate`."""
    if _is_jax(xp) and not (_is_tracer(cos) or _is_tracer(sin)):
        from .._jax_eager import compiled_call

        inside = dtype if dtype in (xp.float32, xp.float64) else None
        cos, sin = compiled_call(_spread, cos, sin, layout=layout, dtype=inside, xp=xp)
    else:
        cos, sin = _spread(cos, sin, layout=layout, dtype=dtype, xp=xp)
    if cos.dtype == dtype:  # full_width made new arrays already
        return cos, sin
    return xp.astype(cos, dtype), xp.astype(sin, dtype)


def _spread(cos: Any, sin: Any, *, layout: Layout, dtype: Any, xp: Any) -> tuple[Any, Any]:
    # Cast, then spread: the same elements (a cast is elementwise), half of them to convert,
    # and a spread that copies the narrower dtype.
    if dtype is not None and cos.dtype != dtype:
        cos, sin = xp.astype(cos, dtype), xp.astype(sin, dtype)
    return full_width(cos, layout=layout, xp=xp), full_width(sin, layout=layout, xp=xp)


def materialize(*arrays: Any, xp: Any, constant: bool) -> tuple[Any, ...]:
    """The arrays, computed as they are rather than fused into their consumers by a tracing
    compiler (for small tables that many elements of a larger array reuse); unchanged outside
    a trace and on namespaces without such a compiler. The arrays come as ``(cos, sin)`` pairs of
    one shape and dtype. ``constant``: no derivative can flow
    through the arrays (made from integer positions and constants only); torch then uses an
    opaque op, else a differentiable stack (:func:`._torch.materialize`)."""
    if is_torch(xp):
        return _torch.materialize(*arrays, constant=constant)
    if _is_jax(xp):
        return _jax.materialize(*arrays)
    return arrays


def cacheable(x: Any, *, ctx: Ctx) -> bool:
    """Whether an array the engine computed may be kept in an eager cache and reused by later
    calls: not a tracer, nor tied to a mode (torch's inference tensors)."""
    if ctx.backend.is_tracing(x):
        return False
    if is_torch(ctx.xp):
        return not _torch.is_inference(x)
    return True


def cache_scope(xp: Any) -> AbstractContextManager[Any]:
    """Context in which arrays meant for an eager cache are computed (torch leaves inference
    mode there, so a table made during inference also serves training)."""
    if is_torch(xp):
        return _torch.cache_scope()
    return nullcontext()


def int_bounds(x: Any, *, ctx: Ctx) -> tuple[int, int] | None:
    """``(min, max)`` of a non-empty integer array as Python ints, or None if they cannot be read
    now (inside a trace). A short 1-D NumPy or CPU torch array is read as a list
    (:func:`short_ints`: a reduction costs more than that)."""
    values = short_ints(x, ctx=ctx, limit=64)
    if values is not None:
        return min(values), max(values)
    if is_torch(ctx.xp):
        return _torch.int_bounds(x)
    if _is_jax(ctx.xp):
        return _jax.int_bounds(x)
    xp = ctx.xp
    lo, hi = xp.min(x), xp.max(x)
    if ctx.backend.is_tracing(lo):  # JAX stages even operations on concrete arrays in a trace
        return None
    return int(lo), int(hi)


def read_one(x: Any, *, ctx: Ctx) -> int | None:
    """The value of a one-element integer array that no trace holds (the caller checked), as a
    Python int; None where reading it would be staged (JAX inside an enclosing ``jax.jit``)."""
    name = getattr(ctx.xp, "__name__", None)
    if name in TORCH_NAMES or name in NUMPY_NAMES:
        return int(x.item())  # one element, any shape: no staging, no reshape
    one = ctx.xp.reshape(x, ())
    if ctx.backend.is_tracing(one):
        return None
    return int(one)


def read_ints(x: Any, *, ctx: Ctx) -> list[int] | None:
    """The values of a small integer array that no trace holds (the caller checked), flattened,
    as Python ints; None where reading them would be staged."""
    name = getattr(ctx.xp, "__name__", None)
    if name in TORCH_NAMES or name in NUMPY_NAMES:
        return x.reshape(-1).tolist()  # type: ignore[no-any-return]  # Python ints already
    flat = ctx.xp.reshape(x, (-1,))
    if ctx.backend.is_tracing(flat):
        return None
    return [int(flat[i]) for i in range(int(flat.shape[0]))]


def take_last(x: Any, idx: Any, *, xp: Any) -> Any:
    """``x`` indexed along its last axis by a 1-D index of non-negative integers: one
    operation (array-api-compat's torch ``take`` first maps negative indices, three more)."""
    if is_torch(xp):
        return sys.modules["torch"].index_select(x, x.ndim - 1, idx)
    return xp.take(x, idx, axis=x.ndim - 1)


def rows_pay_off(xp: Any) -> bool:
    """Whether one decode position's row, sliced from a kept table, costs less than computing
    it: not on JAX, where each eager slice dispatches a program of its own while the
    computation runs as one compiled program."""
    return not _is_jax(xp)


def short_ints(x: Any, *, ctx: Ctx, limit: int) -> tuple[int, ...] | None:
    """The values of a non-empty 1-D integer array of at most ``limit`` elements as a tuple of
    Python ints, where reading them costs less than one small operation: an eager NumPy or CPU
    torch array (a list, no reduction); None otherwise (a trace, a device, another framework,
    another dtype or shape)."""
    if (type(x).__module__, type(x).__name__) not in _PLAIN_ARRAYS or x.ndim != 1 \
            or not 0 < x.shape[0] <= limit or not getattr(x, "is_cpu", True) \
            or ctx.backend.is_tracing(x):
        return None  # (a subclass, such as a sharded DTensor, may read values collectively)
    values = x.tolist()
    return tuple(values) if type(values[0]) is int else None  # (not float, nor bool)


def wide_int(xp: Any) -> Any:
    """The integer dtype positions are computed in: int64, or int32 under JAX without x64
    (which has no int64)."""
    if _is_jax(xp):
        return _jax.wide_int(xp)
    return xp.int64


def reads_cheaply(x: Any, *, xp: Any) -> bool:
    """Whether reading values of ``x`` on the host costs no device synchronization (the engine
    may then look at them to pick a faster path)."""
    if is_torch(xp):
        return bool(getattr(x, "is_cpu", True))
    if _is_jax(xp):
        return _jax.reads_cheaply(x)
    return True


def clip_int(d: Any, low: int, high: int, *, xp: Any) -> Any:
    """``clip(d, low, high)`` of an integer array ``d`` by Python ints, in ``d``'s dtype.

    The generic form is two ``where``s (the reference); torch's ``clamp`` and NumPy's
    ``minimum(maximum(...))`` give the same integers in one kernel each, where array-api-compat's
    ``clip`` (broadcasting and dtype checks) and its ``where`` with a Python scalar cost more
    than the arithmetic of a small call."""
    name = getattr(xp, "__name__", None)  # (read once: a small call's cost)
    if name in TORCH_NAMES:
        return sys.modules["torch"].clamp(d, low, high)  # (torch is imported: d is a tensor)
    if name in NUMPY_NAMES and d.ndim:  # (0-d: NumPy gives a scalar)
        import numpy as np

        return np.minimum(np.maximum(d, low), high)
    return xp.where(d > high, high, xp.where(d < low, low, d))
