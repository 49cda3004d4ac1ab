"""CPU torch tensors through the C kernel, eager, and the choice made under ``torch.compile``.

Eager, taken: plain ``torch.Tensor`` objects (not a subclass such as ``FakeTensor``, ``DTensor``
or ``Parameter``) on the CPU, with storage of their own (a ``torch.func`` wrapper or a
functionalized tensor has none: its ``numpy()`` view fails, and the kernel declines), ``x``
float32, float64 or bfloat16, tables float32 or float64, laid out as :mod:`._numpy` takes them
(the tensors are handed to the extension as NumPy views of their memory: ``t.numpy()``, a
bfloat16 one viewed as int16 first, so the extension checks every extent against the tensor's
own). Declined wherever a derivative may be asked for: grad mode on and an input requiring grad,
an open forward-mode ``dual_level``, a ``torch.func`` transform (its wrappers), or a
``torch.jit.trace`` (the call would not be recorded).

Under ``torch.compile`` (Dynamo tracing :func:`rotate`): the opaque op
``peregistry_rotary_c::rotate`` (:mod:`._torch_op`) where it pays, else None so that the core's
plain expression is traced and inductor fuses it (see :func:`_under_compile`).

Private torch names read here (each guarded, each tested by ``tests/test_torch.py`` so that a
torch which drops one fails loudly): ``torch.autograd.forward_ad._current_level`` (whether a
dual level is open; without it the public ``unpack_dual`` is asked) and
``torch._C._functorch.get_dynamic_layer_stack_depth`` (a ``torch.func`` transform around a
compiled region, which Dynamo guards; without it nothing compiles to the op).
"""

from __future__ import annotations

import sys
from types import ModuleType
from typing import Any

import torch
import torch.utils._python_dispatch

from . import _numpy
from .kernel import TORCH_PATH, load

__all__ = ["COMPILED_KERNEL_ELEMENTS", "KERNEL_DTYPES", "derivative_possible", "rotate",
           "rotate_eager", "rotate_functional"]

#: Under ``torch.compile``, the fewest elements of ``x`` the op rotates: below, its fixed cost
#: (~15 us on 2 threads) is more than inductor's fused loop takes (interleaved, measured against
#: it in the core's docs/benchmarks.md: 1.12-1.16x at 32k elements, even at 128k-256k,
#: 0.77-0.88x from 1M).
COMPILED_KERNEL_ELEMENTS = 1 << 18

#: ``(x, tables)`` dtypes the kernel rotates: the generic rotation converts ``x`` to the
#: tables' dtype, rotates, and converts back once; the kernel has a row loop for each pair.
KERNEL_DTYPES = frozenset((xd, wd) for xd in (torch.float32, torch.float64, torch.bfloat16)
                          for wd in (torch.float32, torch.float64))

_fwad = torch.autograd.forward_ad
_dispatch_mode = torch.utils._python_dispatch._get_current_dispatch_mode
_functorch = getattr(torch._C, "_functorch", None)
#: ``torch._C._functorch.get_dynamic_layer_stack_depth`` (None if this torch lacks it).
_functorch_depth = getattr(_functorch, "get_dynamic_layer_stack_depth", None)


def _dual_level_open(x: Any, cos: Any, sin: Any) -> bool:
    """Whether forward-mode AD could carry a tangent through the rotation."""
    level = getattr(_fwad, "_current_level", None)
    if level is not None:
        return bool(level >= 0)
    # (a torch without the private level: ask each tensor, publicly)
    return any(_fwad.unpack_dual(t).tangent is not None for t in (x, cos, sin))


def _modes_active() -> bool:
    """Whether a ``TorchDispatchMode`` (``make_fx``, FLOP counters, ...) or a torch-function mode
    is active: they see torch's ops, and a rotation computed in C would be hidden from them
    (``make_fx`` would record its answer as a constant). Private names of torch, asserted to
    exist by tests/test_torch.py."""
    return bool(_dispatch_mode() is not None or torch._C._is_torch_function_mode_enabled())


def derivative_possible(x: Any, cos: Any, sin: Any) -> bool:
    """Whether a derivative could be asked through this rotation: an input requiring grad with
    grad mode on, or a forward-mode ``dual_level`` open (dual tensors)."""
    return bool((torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad
                                               or sin.requires_grad))
                or _dual_level_open(x, cos, sin))


def rotate(module: ModuleType, x: Any, cos: Any, sin: Any, interleaved: bool) -> Any | None:
    """The kernel's answer for torch tensors (see the module), or None."""
    if torch.compiler.is_compiling():
        return _under_compile(x, cos, sin, interleaved)
    return rotate_eager(module, x, cos, sin, interleaved)


def rotate_eager(module: ModuleType, x: Any, cos: Any, sin: Any, interleaved: bool) -> Any | None:
    """Eager: the kernel's rotation of ``x``, or None (see the module)."""
    tensor = torch.Tensor
    if (type(x) is not tensor or type(cos) is not tensor or type(sin) is not tensor
            or derivative_possible(x, cos, sin) or torch.jit.is_tracing() or _modes_active()
            or not (x.is_cpu and cos.is_cpu and sin.is_cpu)
            or x.is_neg() or cos.is_neg() or sin.is_neg()):
        return None
    bf16 = x.dtype == torch.bfloat16
    try:
        # NumPy views of the tensors' own memory (zero-copy): the extension checks the plan
        # against them. A tensor without storage of its own has none: a torch.func wrapper
        # raises, a functionalization wrapper has a null data pointer (and its numpy() reads
        # values older than its own: measured), so both are declined. (requires_grad under
        # no_grad: a view of the values)
        if not (x.data_ptr() and cos.data_ptr() and sin.data_ptr()):
            return None
        xv = _view(x.view(torch.int16) if bf16 else x)
        cv, sv = _view(cos), _view(sin)
    except (RuntimeError, TypeError, ValueError):
        return None
    out = _numpy.run(module, xv, cv, sv, interleaved, PLANS, bf16, torch.get_num_threads)
    if out is None:
        return None
    # Allocated by NumPy, then wrapped: a third of torch.empty_like's cost on a decode step.
    # (Its storage is NumPy's, so it cannot be resized in place: resize_() raises, as it does
    # on any tensor that ever gave a NumPy view; README, "Limits".)
    result = torch.from_numpy(out)
    return result.view(torch.bfloat16) if bf16 else result


def _view(t: Any) -> Any:
    """A NumPy view of ``t``'s memory."""
    return (t.detach() if t.requires_grad else t).numpy()


#: The plans of torch's NumPy views (bfloat16 as int16), by layout (at most 64).
PLANS: dict[tuple[Any, ...], Any] = {}


def rotate_functional(x: Any, cos: Any, sin: Any, interleaved: bool) -> Any:
    """The plain torch expression of the generic rotation (differentiable, traceable): ``x`` in
    the tables' dtype, ``a·c - b·s`` and ``b·c + a·s`` (each product and sum rounded once), back
    to ``x``'s dtype once. The op's answer where the kernel declines at run time."""
    h = x.shape[-1] // 2
    xc = x.to(cos.dtype)
    if interleaved:
        a, b = xc[..., 0::2], xc[..., 1::2]
    else:
        a, b = xc[..., :h], xc[..., h:]
    o1 = a * cos - b * sin
    o2 = b * cos + a * sin
    rot = torch.stack((o1, o2), dim=-1).flatten(-2) if interleaved else torch.cat((o1, o2), dim=-1)
    return rot.to(x.dtype)


def _under_compile(x: Any, cos: Any, sin: Any, interleaved: bool) -> Any | None:
    """Under ``torch.compile``: the opaque ``peregistry_rotary_c::rotate`` op where it pays,
    else None (the core's plain expression is traced, which inductor fuses).

    It pays for interleaved or bfloat16 rotations: inductor's loop over stride-2 pairs is scalar
    and its bfloat16 half-layout loop up to 6x the kernel's time, while its float32 and float64
    half-layout loops run as fast as the kernel (measured in the core, docs/benchmarks.md). Only
    where nothing can take a derivative through it (the op has none): no gradient needed, no
    ``torch.func`` transform (Dynamo reads and guards the functorch depth), no forward-mode
    level, not exported (a saved program naming this op would not load where this package is
    not installed); and only where the kernel runs: built and on, a contiguous CPU ``x`` (a
    transposed one fuses better into inductor's own loop) of a dtype it takes, of at least
    :data:`COMPILED_KERNEL_ELEMENTS` elements. Dynamo evaluates all of it while tracing."""
    if not (interleaved or x.dtype == torch.bfloat16):
        return None
    if (load() is None or _functorch_depth is None or torch.compiler.is_exporting()
            or _functorch_depth() != 0 or derivative_possible(x, cos, sin)):
        return None
    if not (x.device.type == "cpu" and cos.device.type == "cpu" and sin.device.type == "cpu"
            and cos.dtype == sin.dtype and (x.dtype, cos.dtype) in KERNEL_DTYPES
            and x.numel() >= COMPILED_KERNEL_ELEMENTS and x.is_contiguous()):
        return None
    from ._torch_op import rotate as op  # (defined on first use: Dynamo runs the import)

    return op(x, cos, sin, interleaved)


TORCH_PATH["torch"] = sys.modules[__name__]
