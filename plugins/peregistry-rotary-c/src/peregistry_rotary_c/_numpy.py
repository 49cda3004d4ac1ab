"""NumPy arrays through the C kernel: the plan (dtype codes, element strides of ``x`` and of the
tables over ``x.shape[:-1]``) and the call.

Taken: exact ``numpy.ndarray`` (not a subclass: a masked array carries a mask the kernel would
drop) of native byte order, ``x`` float32 or float64 with contiguous rows (its last axis of
stride one item; any strides before it: transposed, stepped, reversed, broadcast), tables float32
or float64 with contiguous rows that broadcast to ``x.shape[:-1]`` without enlarging it, and
every array aligned to its items. Declined (None): everything else, and empty arrays. The
extension checks all of it again against each buffer, so a mistake here is an exception, never a
stray read or write.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from types import ModuleType
from typing import Any

__all__ = ["PLANS", "broadcast_strides", "numpy_threads", "plan", "rotate", "run"]

#: ``numpy`` dtype char -> the kernel's dtype code (native byte order only: see :func:`plan`).
_CODES = {"f": 0, "d": 1}

#: ``(shape, strides, dtype of x, cos, sin)`` -> what :func:`plan` found (facts of the layouts
#: alone: at most 64, then forgotten all at once).
PLANS: dict[tuple[Any, ...], Any] = {}
_UNPLANNED = object()

#: Below this many elements a call runs on one thread (the extension's own rule, 2^16 elements
#: a thread), so the thread count is not even read.
_MIN_THREADED = 2 << 16

Plan = tuple[int, int, tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, ...], int]


def rotate(module: ModuleType, x: Any, cos: Any, sin: Any, interleaved: bool) -> Any | None:
    """``x`` rotated by the kernel, or None (see the module)."""
    ndarray = sys.modules["numpy"].ndarray
    if type(cos) is not ndarray or type(sin) is not ndarray:
        return None
    return run(module, x, cos, sin, interleaved, PLANS, False, numpy_threads)


def run(module: ModuleType, x: Any, cos: Any, sin: Any, interleaved: bool, plans: dict[tuple[Any, ...], Any],
        bf16: bool, threads: Callable[[], int]) -> Any | None:
    """The kernel on NumPy arrays (``x`` int16 or uint16 holding bfloat16 bits where ``bf16``):
    the plan looked up in ``plans`` by the layouts, a new C-contiguous output, ``threads()``
    asked only for arrays large enough to use them. None if the plan is None."""
    key = (x.shape, x.strides, x.dtype, cos.shape, cos.strides, cos.dtype, sin.shape, sin.strides,
           sin.dtype)
    found = plans.get(key, _UNPLANNED)
    if found is _UNPLANNED:
        found = plan(x, cos, sin, bf16=bf16)
        if len(plans) >= 64:
            plans.clear()
        plans[key] = found
    # (alignment is of the data pointer, not of the layout: asked on every call)
    if found is None or not (x.flags.aligned and cos.flags.aligned and sin.flags.aligned):
        return None
    xcode, wcode, lead, xstr, cstr, sstr, size = found
    out = sys.modules["numpy"].empty(x.shape, x.dtype)
    module.rotate(x, out, cos, sin, lead, xstr, cstr, sstr, x.shape[-1], interleaved, xcode, wcode,
                  threads() if size >= _MIN_THREADED else 1)
    return out


def plan(x: Any, cos: Any, sin: Any, *, bf16: bool = False) -> Plan | None:
    """The kernel's dtype codes, ``x.shape[:-1]``, the element strides of ``x``, ``cos`` and
    ``sin`` over it (0 where a table broadcasts) and ``x.size``; None if the kernel does not take
    these arrays. ``bf16``: ``x`` holds bfloat16 bits in 16-bit integers (a torch tensor's)."""
    if not (x.dtype.isnative and cos.dtype.isnative and sin.dtype.isnative):
        return None
    xcode = (2 if x.dtype.char in "hH" else None) if bf16 else _CODES.get(x.dtype.char)
    wcode = _CODES.get(cos.dtype.char)
    if xcode is None or wcode is None or sin.dtype != cos.dtype:
        return None
    if x.ndim < 1 or x.ndim - 1 > 64 or x.size == 0:
        return None
    rd = x.shape[-1]
    if rd < 2 or rd % 2 or x.strides[-1] != x.itemsize:
        return None
    lead = x.shape[:-1]
    xstr = _elements(x.strides[:-1], x.itemsize)
    cstr = _table_strides(cos, lead, rd // 2)
    sstr = _table_strides(sin, lead, rd // 2)
    if xstr is None or cstr is None or sstr is None:
        return None
    return xcode, wcode, lead, xstr, cstr, sstr, x.size


def _table_strides(t: Any, lead: tuple[int, ...], half: int) -> tuple[int, ...] | None:
    """A ``(..., half)`` table's element strides over ``lead``, or None (see :func:`plan`)."""
    if t.ndim < 1 or t.shape[-1] != half or (half > 1 and t.strides[-1] != t.itemsize):
        return None
    own = _elements(t.strides[:-1], t.itemsize)
    if own is None:
        return None
    return broadcast_strides(t.shape[:-1], own, lead)


def _elements(strides: tuple[int, ...], itemsize: int) -> tuple[int, ...] | None:
    """Byte strides as element strides, or None if one is not a whole number of items."""
    if any(s % itemsize for s in strides):
        return None
    return tuple(s // itemsize for s in strides)


def broadcast_strides(shape: tuple[int, ...], strides: tuple[int, ...],
                      lead: tuple[int, ...]) -> tuple[int, ...] | None:
    """Element strides of leading axes ``shape`` (with ``strides``) over ``lead``: their own
    stride where a size matches, 0 where they broadcast (missing, or of size 1). None if they do
    not broadcast to ``lead`` without enlarging it (the generic rotation's result would not have
    ``x``'s shape)."""
    m, n = len(shape), len(lead)
    if m > n:
        return None
    out = [0] * n
    for k in range(n - m, n):
        j = k - (n - m)
        size = shape[j]
        if size == lead[k]:
            out[k] = strides[j] if size != 1 else 0
        elif size != 1:
            return None
    return tuple(out)


# -- threads for NumPy -------------------------------------------------------------------------
class _Cores:
    """The CPUs this process may run on, found once per process (a forked child asks again)."""

    pid = -1
    count = 1


_CORES = _Cores()


def numpy_threads() -> int:
    """Threads a NumPy rotation may use: ``OMP_NUM_THREADS`` if set (its first entry, as OpenMP
    reads a list), else the CPUs in this process's affinity mask (``taskset``, cgroup cpusets),
    else ``os.cpu_count()``. Read at each large call, so a change of the variable is followed."""
    env = os.environ.get("OMP_NUM_THREADS")
    if env:
        try:
            n = int(env.split(",")[0])
        except ValueError:
            n = 0
        if n >= 1:
            return n
    pid = os.getpid()
    if _CORES.pid != pid:
        if hasattr(os, "sched_getaffinity"):
            _CORES.count = max(1, len(os.sched_getaffinity(0)))
        else:  # macOS: no affinity masks
            _CORES.count = os.cpu_count() or 1
        _CORES.pid = pid
    return _CORES.count
