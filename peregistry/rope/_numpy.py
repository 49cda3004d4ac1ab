"""NumPy fast path of the rope engine, reached only through :mod:`._delegation`: the fused C kernel
(:mod:`._kernel`) rotates a C-contiguous float32 or float64 array in one pass over memory, bit
for bit the generic rotation of :mod:`._funcs` (whose seven NumPy operations each pass over
memory). Anything else returns None and the caller takes the generic rotation: another dtype, an
array that is not C-contiguous, a subclass (a masked array), tables of another dtype than ``x``,
or the kernel not built or switched off (``PEREGISTRY_NATIVE=0``).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ._kernel import KERNEL, UNLOADED, load_kernel

__all__ = ["PLANS", "rotate"]

#: The kernel's dtype codes (of ``x``, and of the tables, which must have ``x``'s dtype).
_CODES = {"float32": 0, "float64": 1}
#: The cores this process may run on: the kernel's workers (it takes one for small arrays).
_THREADS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
#: ``(shapes, strides and dtypes of x, cos, sin; rotary_dim)`` -> what :func:`_plan` found: facts
#: of the layouts alone, at most 64 (then forgotten all at once), emptied by ``clear_caches``.
PLANS: dict[tuple[Any, ...], Any] = {}
_UNPLANNED = object()


def rotate(x: Any, cos: Any, sin: Any, *, rotary_dim: int, interleaved: bool) -> Any | None:
    """``x`` rotated by half-width tables of its dtype by the C kernel, or None (see the module)."""
    kernel = KERNEL.module
    if kernel is UNLOADED:
        kernel = load_kernel()
    if kernel is None:
        return None
    np = sys.modules["numpy"]  # imported: x is an array of it
    if (type(x) is not np.ndarray or type(cos) is not np.ndarray or type(sin) is not np.ndarray
            or not x.flags.c_contiguous):
        return None
    key = (x.shape, x.dtype, cos.shape, cos.strides, cos.dtype, sin.shape, sin.strides, sin.dtype,
           rotary_dim)
    plan = PLANS.get(key, _UNPLANNED)
    if plan is _UNPLANNED:
        plan = _plan(np, x, cos, sin, rotary_dim)
        if len(PLANS) >= 64:
            PLANS.clear()
        PLANS[key] = plan
    if plan is None:
        return None
    code, cos_strides, sin_strides = plan
    out = np.empty_like(x)
    kernel.rotate(x, out, cos, sin, code, code, x.shape[-1], rotary_dim, interleaved,
                  x.shape[:-1], cos_strides, sin_strides, _THREADS)
    return out


def _plan(np: Any, x: Any, cos: Any, sin: Any,
          rotary_dim: int) -> tuple[int, tuple[int, ...], tuple[int, ...]] | None:
    """The dtype code and the tables' element strides over ``x.shape[:-1]`` (0 where they
    broadcast, as NumPy's own broadcasting gives them), or None if the kernel does not take
    these arrays."""
    code = _CODES.get(x.dtype.name)
    half = rotary_dim // 2
    if code is None or x.ndim - 1 > 16:
        return None
    strides = []
    for table in (cos, sin):
        if table.dtype != x.dtype or table.shape[-1] != half or table.strides[-1] != table.itemsize:
            return None
        try:
            spread = np.broadcast_to(table, (*x.shape[:-1], half))
        except ValueError:  # does not broadcast: the generic rotation says so
            return None
        if any(s % table.itemsize for s in spread.strides):
            return None
        strides.append(tuple(s // table.itemsize for s in spread.strides[:-1]))
    return code, strides[0], strides[1]
