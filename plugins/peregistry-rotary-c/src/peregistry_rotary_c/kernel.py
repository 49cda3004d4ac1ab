"""The rotation kernel the core calls: :class:`CRotationKernel`.

``rotate(x, cos, sin, layout=...)`` returns ``x`` rotated by half-width tables, a new array equal
bit for bit to peregistry's generic rotation (``peregistry.rope.apply_rotation`` with the tables'
dtype as the computing dtype): for each pair ``(a, b)`` of ``x`` (``(i, i + R/2)`` in the
``"half"`` layout, ``(2i, 2i+1)`` ``"interleaved"``), ``a' = a·c - b·s`` and ``b' = b·c + a·s``,
RoFormer (Su et al. 2021), eq. (34), each product and the sum rounded once in the tables' dtype
(no fused multiply-add), then one rounding to ``x``'s dtype. Or ``None``, where it does not
apply: it never changes a result, only how fast one comes.

It takes NumPy arrays (:mod:`._numpy`) and CPU torch tensors (:mod:`._torch`), eager; under
``torch.compile`` it gives Dynamo an opaque op where that pays (:mod:`._torch_op`).

``PEREGISTRY_NATIVE=0`` switches it off for a process (read once, on first use).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from types import ModuleType
from typing import Any

from . import _numpy
from ._numpy import numpy_threads

__all__ = ["NATIVE_ENV", "CRotationKernel", "kernel_status", "load", "numpy_threads"]

#: Set to ``0`` (or false/no/off) to switch the kernel off.
NATIVE_ENV = "PEREGISTRY_NATIVE"

_OFF = ("0", "false", "no", "off")
_ON = ("1", "true", "yes", "on", "")


class _State:
    """The extension module as loaded on first use (None: not built, or switched off) and the
    status :func:`kernel_status` reports."""

    loaded = False
    module: ModuleType | None = None
    status = ""


STATE = _State()


def load() -> ModuleType | None:
    """The ``peregistry_rotary_c._rotary`` extension, or None (not built, or switched off)."""
    if not STATE.loaded:
        _load()
    return STATE.module


def _load() -> None:
    raw = os.environ.get(NATIVE_ENV, "1")
    value = raw.strip().lower()
    module: ModuleType | None = None
    if value in _OFF:
        status = f"off ({NATIVE_ENV}={raw})"
    elif value not in _ON:
        # A typo must not break every rotation of the process, nor pass unseen: off, and said.
        status = f"off ({NATIVE_ENV}={raw!r} is not one of 1/0, true/false, yes/no, on/off)"
        warnings.warn(f"peregistry-rotary-c: {status}", RuntimeWarning, stacklevel=3)
    else:
        try:
            module = importlib.import_module("peregistry_rotary_c._rotary")
        except ImportError as e:  # an editable checkout whose extension was never compiled
            status = f"not built ({e})"
        else:
            status = "active"
    STATE.module, STATE.status, STATE.loaded = module, status, True


def kernel_status() -> str:
    """``"active"``, ``"off (PEREGISTRY_NATIVE=0)"`` or ``"not built (<import error>)"``."""
    load()
    return STATE.status


# -- the kernel -------------------------------------------------------------------------------
class CRotationKernel:
    """The fused C rotation (see the module): NumPy arrays and CPU torch tensors of float32,
    float64 or (torch) bfloat16, tables of float32 or float64, any leading strides."""

    name = "c-rotary"
    priority = 0
    ulps = 0

    def status(self) -> str:
        """``"active"``, or why not: ``"not built (...)"``, ``"off (PEREGISTRY_NATIVE=0)"``.
        Asked by the core before its first rotation (when a rotary encoder is made): with torch
        imported, the torch path is imported now, eagerly, not first inside a compiled region
        (Dynamo guards on :data:`TORCH_PATH`, which that import fills)."""
        status = kernel_status()
        if status == "active" and "torch" in sys.modules and "torch" not in TORCH_PATH:
            from . import _torch  # noqa: F401  (registers itself in TORCH_PATH)
        return status

    def isa(self) -> str | None:
        """The instruction set the extension chose at import (``avx512``, ``avx2`` or
        ``baseline``; ``peregistry bench`` prints it), or None without the extension."""
        module = load()
        return None if module is None else str(module.ISA)

    def threads(self) -> str:
        """The threads a large rotation runs on (``peregistry bench`` prints it): NumPy arrays
        on :func:`numpy_threads`, torch tensors on ``torch.get_num_threads()`` (read at each
        call; a small one runs on one)."""
        text = f"NumPy {numpy_threads()}"
        torch = sys.modules.get("torch")
        if torch is not None:
            text += f", torch {torch.get_num_threads()}"
        return text

    def rotate(self, x: Any, cos: Any, sin: Any, *, layout: str) -> Any | None:
        """``x`` ``(..., seq, R)`` rotated by ``cos``, ``sin`` ``(..., seq, R/2)``: a new array of
        ``x``'s shape, dtype, namespace and device, bit for bit the generic rotation, or None
        to decline."""
        if layout == "half":
            interleaved = False
        elif layout == "interleaved":
            interleaved = True
        else:
            raise ValueError(f"layout: expected 'half' or 'interleaved', got {layout!r}")
        module = STATE.module if STATE.loaded else load()
        if module is None:
            return None
        np = sys.modules.get("numpy")  # (x is not NumPy's if NumPy is not imported)
        if np is not None and type(x) is np.ndarray:
            return _numpy.rotate(module, x, cos, sin, interleaved)
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(x, torch.Tensor):
            path: Any = TORCH_PATH.get("torch")
            if path is None:
                if torch.compiler.is_compiling():
                    # (importing fills TORCH_PATH, which Dynamo guards: not while it traces;
                    # status() imports it eagerly once torch is imported)
                    return None
                from . import _torch as path
            return path.rotate(module, x, cos, sin, interleaved)
        return None

    def __repr__(self) -> str:
        return f"CRotationKernel(name={self.name!r}, status={self.status()!r})"


#: ``{"torch": peregistry_rotary_c._torch}`` once that module is imported (it registers itself:
#: the hot path then does not run an import statement).
TORCH_PATH: dict[str, ModuleType] = {}

