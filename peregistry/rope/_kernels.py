"""Rotation kernels: fast paths of the rotation that plugins provide.

The core is pure Python; native code ships in distributions of its own (such as
``plugins/peregistry-rotary-c``), which return kernels from the ``peregistry_rotation_kernels``
hook. A kernel is any object with a ``name`` and ``rotate(x, cos, sin, *, layout)``::

    class MyKernel:
        name = "my-cpu-rotation"
        def rotate(self, x, cos, sin, *, layout):
            # x: (..., seq, R), the rotary features only (a view where rotary_dim < dim);
            # cos, sin: (..., seq, R/2), broadcastable against x, in the dtype the rotation
            # computes in; layout: "half" or "interleaved"
            return None       # decline: framework, device, dtype, strides, size, a tracer,
                              # or a derivative that may be asked for

    @per.hookimpl
    def peregistry_rotation_kernels():
        return [MyKernel()]

An answer is a new array equal to :func:`peregistry.rope.apply_rotation` on the same
arguments. The core tries the active kernels in turn (``priority``, higher first), then its own
framework paths and the generic rotation, so a kernel changes how fast a rotation runs, never
its result; :func:`peregistry.testing.check_rotation_kernel` holds a kernel to that. Optional
attributes: ``status()`` (``"active"``, or why not, e.g. ``"not built (...)"``), ``priority``
and ``ulps`` (a tolerance the kernel declares; 0, bit for bit, by default).

Kernels are process-wide: those of the default registry, read when the first rotary encoder is
made (and again after a plugin is registered or unregistered, or :func:`clear_caches`, which
empty :data:`ACTIVE`); an exception a kernel raises reaches the caller.
"""

from __future__ import annotations

import _thread
import warnings
from typing import TYPE_CHECKING, Any, Protocol

from ..kinds._services import default_services, dynamo_tracing

if TYPE_CHECKING:
    from .._records import KernelInfo

__all__ = ["RotationKernel", "kernel_isa", "kernel_status", "kernels"]


class RotationKernel(Protocol):
    """What the ``peregistry_rotation_kernels`` hook returns (see the module)."""

    name: str

    def rotate(self, x: Any, cos: Any, sin: Any, *, layout: str) -> Any | None:
        """``x`` rotated by the half-width tables (a new array of ``x``'s shape, dtype,
        namespace and device), equal to :func:`peregistry.rope.apply_rotation`, or None."""
        ...


#: The active kernels of the default registry, in the order tried; None until first read, and
#: again after a plugin is registered or unregistered (the registry empties it).
ACTIVE: tuple[Any, ...] | None = None
#: How many times :data:`ACTIVE` was forgotten: a list read after a reset is not kept.
_GENERATION = [0]
_LOCK = _thread.allocate_lock()


def active() -> tuple[Any, ...]:
    """:data:`ACTIVE`, read from the default registry if it is not yet (every rotary encoder asks
    when it is made, so a model compiled before its first eager call sees the kernels too). Not
    while Dynamo traces (the registry takes a lock and calls plugin code): no kernel then."""
    global ACTIVE
    found = ACTIVE
    if found is None:
        if dynamo_tracing():
            return ()
        seen = _GENERATION[0]
        found = tuple(k.kernel for k in default_services().rotation_kernels() if k.active)
        with _LOCK:  # not if a reset came meanwhile (a plugin registered or removed)
            if _GENERATION[0] == seen:
                ACTIVE = found
    return found


def reset() -> None:
    """Forget :data:`ACTIVE` (the registry calls this when its plugins change)."""
    global ACTIVE
    with _LOCK:
        ACTIVE = None
        _GENERATION[0] += 1


def kernels() -> list[KernelInfo]:
    """Every rotation kernel installed, in the order tried: its name, plugin (distribution and
    version), and ``status``: ``"active"`` or why not (the kernel's own word, such as
    ``"not built (...)"`` or ``"off (PEREGISTRY_NATIVE=0)"``; ``"conflict"``; ``"error"``).

    >>> import peregistry as per
    >>> [k.name for k in per.rope.kernels() if k.active]  # doctest: +SKIP
    ['c-rotary']
    """
    return default_services().rotation_kernels()


def rotate(kernels: tuple[Any, ...], x: Any, cos: Any, sin: Any, *, rotary_dim: int,
           interleaved: bool, xp: Any) -> Any | None:
    """The first answer of ``kernels`` for the rotary features of ``x`` (the others pass through
    unchanged), or None if every kernel declined."""
    dim = x.shape[-1]
    xr = x if rotary_dim == dim else x[..., :rotary_dim]
    layout = "interleaved" if interleaved else "half"
    for kernel in kernels:
        out = kernel.rotate(xr, cos, sin, layout=layout)
        if out is not None:
            if rotary_dim == dim:
                return out
            # x: [r0 r1 r2 r3 | p0 p1] -> [rotated r | p0 p1]
            return xp.concat((out, x[..., rotary_dim:]), axis=-1)
    return None


def kernel_status() -> str:
    """Deprecated (0.2): the C kernel is a plugin now; use :func:`kernels`. ``"on (NAME, ...)"``
    with the active kernels, else why none is (``"not installed"`` or each kernel's status)."""
    warnings.warn("peregistry.rope.kernel_status() is deprecated: rotation kernels are plugins "
                  "(the C kernel is the distribution plugins/peregistry-rotary-c); use "
                  "peregistry.rope.kernels()", DeprecationWarning, stacklevel=2)
    rows = kernels()
    on = [k.name for k in rows if k.active]
    if on:
        return f"on ({', '.join(on)})"
    return "; ".join(f"{k.name}: {k.status}" for k in rows) or "not installed"


def kernel_isa() -> str:
    """Deprecated (0.2): the instruction set of the first active kernel that says one (its
    ``isa`` attribute), else ``"-"``; use :func:`kernels`."""
    warnings.warn("peregistry.rope.kernel_isa() is deprecated: rotation kernels are plugins; "
                  "use peregistry.rope.kernels()", DeprecationWarning, stacklevel=2)
    for k in kernels():
        if k.active and isinstance(getattr(k.kernel, "isa", None), str):
            return str(k.kernel.isa)
    return "-"
