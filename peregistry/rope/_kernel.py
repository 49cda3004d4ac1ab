"""The optional C rotation kernel (``peregistry/_native/rotary.c``), as the rope engine sees it.

The kernel is built at install time when a C compiler is present; without one the install still
succeeds and the engine keeps its pure framework paths. ``PEREGISTRY_NATIVE=0`` switches the
kernel off for a process (to compare the two paths, or to rule the kernel out when debugging).
:func:`kernel_status` says which applies; ``peregistry bench`` prints it.

Framework-free: the kernel takes addresses (or buffers), shapes and element strides, and the fast
paths that call it (:mod:`._torch`, :mod:`._numpy`) check device, dtype, layout and
broadcasting first.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass
from typing import Any

#: Set to ``0`` to switch the native kernel off (read on first use).
NATIVE_ENV = "PEREGISTRY_NATIVE"

#: dtype name -> the kernel's code for ``x``; the tables must be float32 (0) or float64 (1).
DTYPE_CODES = {"float32": 0, "float64": 1, "bfloat16": 2, "float16": 3}

#: ``KERNEL.module`` before the first load (the hot path tests it inline, see rope/_torch_kernel.py).
UNLOADED: Any = object()


@dataclass
class _KernelState:
    """The kernel as loaded on first use: its module (None: not built, or switched off) and the
    status :func:`kernel_status` reports."""

    module: Any = UNLOADED
    status: str = ""

    def load(self) -> None:
        value = os.environ.get(NATIVE_ENV, "1").strip().lower()
        if value in ("0", "false", "no", "off"):
            self.module, self.status = None, f"off ({NATIVE_ENV}={os.environ[NATIVE_ENV]})"
        elif value not in ("1", "true", "yes", "on", ""):
            raise ValueError(f"{NATIVE_ENV}={os.environ[NATIVE_ENV]!r}: expected 1 or 0 "
                             f"(also true/false, yes/no, on/off)")
        else:
            try:  # the optional extension module, built at install time where it could be
                module = importlib.import_module("peregistry._rotary_kernel")
            except ImportError as e:
                self.module, self.status = None, f"not built ({e})"
            else:
                self.module, self.status = module, "on"


KERNEL = _KernelState()


def load_kernel() -> Any | None:
    """The ``peregistry._rotary_kernel`` module, or None (not built, or switched off)."""
    if KERNEL.module is UNLOADED:
        KERNEL.load()
    return KERNEL.module


def kernel_status() -> str:
    """``"on"``, ``"off (PEREGISTRY_NATIVE=0)"`` or ``"not built (<import error>)"``."""
    load_kernel()
    return KERNEL.status


def kernel_isa() -> str:
    """The instruction set the kernel runs with (``avx512``, ``avx2`` or ``baseline``), or
    ``"-"`` without a kernel."""
    k = load_kernel()
    return "-" if k is None else str(k.ISA)


_OPENMP_NAMES = ("libgomp", "libiomp5", "libomp")
_gomp_cache: dict[str, int] = {}


def gomp_parallel_address(package_dir: str) -> int:
    """Address of ``GOMP_parallel`` in the OpenMP runtime loaded from under ``package_dir`` (a
    framework's own copy, e.g. ``torch/lib/libgomp.so.1``), or 0 if there is none or it cannot
    be found (not Linux, no OpenMP). Passing it to the kernel runs the kernel's workers on that
    framework's OpenMP team: the threads it already has, which spin for a while after each of its
    parallel ops and would otherwise compete with the kernel's own threads for the same cores.
    GNU, LLVM and Intel OpenMP all export this entry point. Looked up once per directory."""
    if package_dir in _gomp_cache:
        return _gomp_cache[package_dir]
    address = 0
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split(None, 5)[5].strip() for line in f if len(line.split(None, 5)) == 6}
    except OSError:
        paths = set()
    prefix = os.path.join(os.path.realpath(package_dir), "")
    for path in sorted(paths):
        name = os.path.basename(path)
        if os.path.realpath(path).startswith(prefix) and name.startswith(_OPENMP_NAMES):
            import ctypes

            try:
                fn = ctypes.CDLL(path).GOMP_parallel
            except (OSError, AttributeError):
                continue
            address = ctypes.cast(fn, ctypes.c_void_p).value or 0
            break
    _gomp_cache[package_dir] = address
    return address
