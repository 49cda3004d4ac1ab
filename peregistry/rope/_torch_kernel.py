"""The two rotations every torch path ends in: the fused C kernel (:mod:`._kernel`) on the
tensors it takes, one pass over memory, and the plain expression (autograd, tracers, and what
the kernel does not take). Bit for bit each other and Hugging Face's
``q·cos + rotate_half(q)·sin``: two products and a sum, each rounded once. Called by the
dispatch of :mod:`._torch` and, under ``torch.compile``, by the ``peregistry::rotate`` op of
:mod:`._torch_op`.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from typing import Any

from ..backends._torch import is_wrapped
from ._kernel import KERNEL, UNLOADED, gomp_parallel_address, load_kernel


def rotate_functional(x: Any, cos: Any, sin: Any, rotary_dim: int, interleaved: bool) -> Any:
    """The plain expression (differentiable, traceable)."""
    import torch

    h = rotary_dim // 2
    if interleaved:
        a, b = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
    else:
        a, b = x[..., :h], x[..., h:rotary_dim]
    o1 = a * cos - b * sin
    o2 = b * cos + a * sin
    rot = torch.stack((o1, o2), dim=-1).flatten(-2) if interleaved else torch.cat((o1, o2), dim=-1)
    if rotary_dim < x.shape[-1]:
        rot = torch.cat((rot, x[..., rotary_dim:].to(rot.dtype)), dim=-1)
    return rot.to(x.dtype)


# -- the C kernel --------------------------------------------------------------------------------
@dataclass
class _KernelDtypes:
    """torch dtype -> the kernel's dtype code (:data:`._kernel.DTYPE_CODES`), and the address
    of torch's OpenMP entry point (:func:`torch_gomp`): process constants, found on first use
    (torch is imported by then)."""

    codes: dict[Any, int] = field(default_factory=dict)
    gomp_address: int | None = None

    def code(self, dtype: Any) -> int | None:
        if not self.codes:
            import torch

            self.codes.update({torch.float32: 0, torch.float64: 1, torch.bfloat16: 2})
        return self.codes.get(dtype)

    def gomp(self) -> int:
        if self.gomp_address is None:
            self.gomp_address = torch_gomp()
        return self.gomp_address


KERNEL_DTYPES = _KernelDtypes()


#: ``(x, tables)`` dtype codes the kernel rotates: tables float32 or float64, and a float64 ``x``
#: only with float64 tables (type promotion would rotate it in float64).
CODE_PAIRS = frozenset((x, w) for x in range(4) for w in (0, 1) if (x, w) != (1, 0))


def takes_dtypes(x_dtype: Any, table_dtype: Any) -> bool:
    """Whether the kernel rotates ``x`` of ``x_dtype`` by tables of ``table_dtype``."""
    return (KERNEL_DTYPES.code(x_dtype), KERNEL_DTYPES.code(table_dtype)) in CODE_PAIRS


def derivative_possible(x: Any, cos: Any, sin: Any) -> bool:
    """Whether a derivative could be asked through this rotation: an input requiring grad with
    grad mode on, or a forward-mode ``dual_level`` open (dual tensors). What the kernel's op
    under ``torch.compile`` must never meet (it has no derivative)."""
    torch = sys.modules["torch"]
    return bool(torch.autograd.forward_ad._current_level >= 0
                or (torch.is_grad_enabled()
                    and (x.requires_grad or cos.requires_grad or sin.requires_grad)))


def rotate_native(x: Any, cos: Any, sin: Any, rotary_dim: int, interleaved: bool, *,
                   plain: bool = False) -> Any | None:
    """The rotation by the fused C kernel: one pass over memory on ``torch.get_num_threads()``
    threads, bit for bit the eager expression. None when it does not apply (kernel not built or
    switched off, not a CPU tensor, not C-contiguous, a dtype it lacks, tables that need more
    than broadcasting). ``plain``: the caller has seen that no torch.func transform runs and
    nothing compiles, so a tensor of the exact class ``torch.Tensor`` is no wrapper."""
    torch = sys.modules["torch"]  # imported (x is a tensor); a dict read, not an import

    kernel = KERNEL.module  # load_kernel(), inline: hot
    if kernel is UNLOADED:
        kernel = load_kernel()
    if kernel is None:
        return None
    tensor = torch.Tensor
    if (not ((type(x) is tensor and type(cos) is tensor and type(sin) is tensor)
             if plain else (_plain(x) and _plain(cos) and _plain(sin)))
            or not (x.is_cpu and cos.is_cpu and sin.is_cpu)
            or x.is_neg() or cos.is_neg() or sin.is_neg()):
        return None
    # What else decides depends only on the three layouts: planned once per signature.
    key = (x.shape, x.stride(), x.dtype, cos.shape, cos.stride(), cos.dtype, sin.shape,
           sin.stride(), sin.dtype, rotary_dim)
    plan = PLANS.get(key, _UNPLANNED)
    if plan is _UNPLANNED:
        plan = _plan(x, cos, sin, rotary_dim)
        if len(PLANS) >= 64:
            PLANS.clear()
        PLANS[key] = plan
    if plan is None:
        return None
    xcode, wcode, lead, cstr, sstr = plan
    threads = torch.get_num_threads()
    gomp = KERNEL_DTYPES.gomp() if threads > 1 else 0
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    kernel.rotate(x.data_ptr(), out.data_ptr(), cos.data_ptr(), sin.data_ptr(), xcode, wcode,
                  x.shape[-1], rotary_dim, interleaved, lead, cstr, sstr, threads, gomp)
    return out


#: ``(shape, strides, dtype of x, cos, sin; rotary_dim)`` -> what :func:`_plan` found: facts
#: of the layouts alone, at most 64 (then forgotten all at once), emptied by ``clear_caches``.
PLANS: dict[tuple[Any, ...], Any] = {}
_UNPLANNED = object()


def _plan(x: Any, cos: Any, sin: Any,
          rotary_dim: int) -> tuple[int, int, tuple[int, ...], Any, Any] | None:
    """The kernel's dtype codes, ``x``'s leading shape and the tables' broadcast strides, or None
    if the kernel does not take these layouts and dtypes."""
    xcode, wcode = KERNEL_DTYPES.code(x.dtype), KERNEL_DTYPES.code(cos.dtype)
    if (xcode is None or wcode is None or (xcode, wcode) not in CODE_PAIRS
            or sin.dtype != cos.dtype
            or not x.is_contiguous() or x.dim() - 1 > 16 or cos.shape[-1] != rotary_dim // 2
            or sin.shape[-1] != rotary_dim // 2 or cos.stride(-1) != 1 or sin.stride(-1) != 1):
        return None
    lead = tuple(x.shape[:-1])
    cstr = broadcast_strides(tuple(cos.shape), cos.stride(), lead)
    sstr = broadcast_strides(tuple(sin.shape), sin.stride(), lead)
    if cstr is None or sstr is None:
        return None
    return xcode, wcode, lead, cstr, sstr


def broadcast_strides(table_shape: tuple[int, ...], table_strides: tuple[int, ...],
                      lead: tuple[int, ...]) -> tuple[int, ...] | None:
    """Element strides of a ``(..., h)`` table over ``lead = x.shape[:-1]``: the table's own
    stride where its axis matches, 0 where it broadcasts (missing or size 1). None if it does
    not broadcast to ``lead`` (the generic path then reports the error)."""
    m, n = len(table_shape) - 1, len(lead)
    if m > n:
        return None
    out = [0] * n
    for k in range(n - m, n):
        j = k - (n - m)
        size = table_shape[j]
        if size == lead[k]:
            out[k] = table_strides[j] if size != 1 else 0
        elif size != 1:
            return None
    return tuple(out)


def _plain(t: Any) -> bool:
    """A real tensor with its own memory: not a subclass (FakeTensor, DTensor, ...), not a
    functionalization or functorch (vmap, grad) wrapper, whose ``data_ptr`` is no buffer."""
    import torch

    return type(t) is torch.Tensor and not is_wrapped(t)


def torch_gomp() -> int:
    """``GOMP_parallel`` of the OpenMP runtime torch's intra-op threads belong to (0: none, use
    POSIX threads). Only when ATen's parallel backend is OpenMP (the default on Linux)."""
    import torch

    if torch._C.has_openmp:
        return gomp_parallel_address(os.path.dirname(torch.__file__))
    return 0
