"""PyTorch fast paths of the rope engine, reached only through :mod:`._delegation`.

Every path here is bit for bit the generic rotation of :mod:`._funcs` (Hugging Face's
``q·cos + rotate_half(q)·sin``: two products and a sum, each rounded once), only faster:

* the fused C kernel (:mod:`._kernel`) for plain, contiguous CPU tensors;
* eager ``out=`` ops into one preallocated output, cache-blocked for large inputs;
* the plain expression where autograd, forward AD, a tracer or a placeholder needs it;
* a ``DTensor`` rotated shard by shard, without communication.

Also the torch answers to the questions asked before a table is kept (inference mode) or values
are read (``aminmax``), and the fusion boundary used under ``torch.compile``.
"""

from __future__ import annotations

import os
import sys
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from ..backends._torch import is_placeholder, is_wrapped
from ._kernel import KERNEL, UNLOADED, gomp_parallel_address, load_kernel

#: Elements per block of the eager rotation: a block and its temporaries (~4 MiB in float32)
#: stay in the last-level cache while the four passes over it run.
BLOCK_ELEMENTS = 1 << 18


# -- the fusion boundary for inductor -----------------------------------------------------------
def materialize(*arrays: Any, constant: bool = True) -> tuple[Any, ...]:
    """Under ``torch.compile``, the arrays made a fusion boundary (else unchanged): inductor
    would otherwise fuse a cos/sin table into the elementwise rotation and recompute its
    trigonometry for every head and batch element. ``constant`` arrays (nothing can be
    differentiated through them) pass ``peregistry::materialize``, an opaque op whose module is
    imported here on the first compiled call (see :mod:`._torch_op`; eager torch never loads
    it). Others are stacked into one buffer and taken apart again (:func:`_stacked`): the op has
    no forward-mode rule, and a ``torch.func`` transform inside a compiled region cannot be
    seen. Not under ``torch.export``: a saved program naming a peregistry op would not load in
    a process that has not defined it."""
    compiler = sys.modules["torch"].compiler  # (torch is imported: a dict read, not an import)
    if not compiler.is_compiling() or compiler.is_exporting():
        return arrays
    if not constant:
        return _stacked(arrays)
    from peregistry.rope._torch_op import materialize as op

    return tuple(op(a) for a in arrays)


def _stacked(arrays: tuple[Any, ...]) -> tuple[Any, ...]:
    """``(cos, sin, ...)`` pairs, each stacked into one buffer and taken apart again: inductor
    writes a stack's inputs once (on the CPU; measured: real-valued positions 7.8 ms without,
    1.6 ms with, as with the op), and stacking is differentiable in every mode."""
    stack = sys.modules["torch"].stack
    return tuple(t for pair in zip(arrays[0::2], arrays[1::2], strict=True)
                 for t in stack(pair).unbind(0))


# -- caching questions -------------------------------------------------------------------------
def is_inference(x: Any) -> bool:
    """An inference tensor: a cached table must not be one (training could not use it later)."""
    return bool(hasattr(x, "is_inference") and x.is_inference())


def cache_scope() -> AbstractContextManager[Any]:
    """Leave inference mode while making a table for the cache, so it also serves training."""
    import torch

    if torch.is_inference_mode_enabled():
        return torch.inference_mode(False)
    return nullcontext()


def int_bounds(x: Any) -> tuple[int, int] | None:
    """One pass (``aminmax``); torch stages nothing eagerly."""
    import torch

    if torch.compiler.is_compiling():
        return None
    lo, hi = torch.aminmax(x)
    return int(lo), int(hi)


# -- the rotation --------------------------------------------------------------------------------
def rotate(x: Any, cos: Any, sin: Any, *, rotary_dim: int, interleaved: bool,
           eager: bool = False) -> Any:
    """Torch rotation, bit for bit Hugging Face's ``q·cos + rotate_half(q)·sin``.

    Under ``torch.compile`` (or with autograd) the plain expression, which inductor fuses into
    one kernel. Eager: the C kernel where it applies, else ``out=`` ops into one preallocated
    output (blocked for large inputs, see :func:`_rotate_blocked`).
    """
    torch = sys.modules["torch"]  # imported (x is a tensor); a dict read, not an import

    # The common case first, in few calls (it is paid on every layer of every decode step): a
    # plain tensor, eager, outside torch.func transforms, where no tensor can be a wrapper.
    # ``eager``: the caller's is_tracing(x) saw that nothing compiles.
    plain = (type(x) is torch.Tensor and (eager or not torch.compiler.is_compiling())
             and torch._C._functorch.peek_interpreter_stack() is None)
    if not plain:
        if _is_dtensor(x):
            return _rotate_dtensor(x, cos, sin, rotary_dim=rotary_dim, interleaved=interleaved)
        # (a batched table with a plain x, under torch.func.vmap: the out= ops have no
        # batching rule)
        if (torch.compiler.is_compiling() or is_placeholder(x) or is_placeholder(cos)
                or is_placeholder(sin)):
            return _rotate_functional(x, cos, sin, rotary_dim, interleaved)
    # Inside forward_ad.dual_level(), dual tensors need the plain expression (the out= ops and
    # the kernel would drop their tangents).
    fwad = sys.modules.get("torch.autograd.forward_ad")
    if ((fwad is not None and getattr(fwad, "_current_level", -1) >= 0)
            or (torch.is_grad_enabled() and (
                x.requires_grad or cos.requires_grad or sin.requires_grad))):
        return _rotate_functional(x, cos, sin, rotary_dim, interleaved)
    out = _rotate_native(x, cos, sin, rotary_dim, interleaved, plain=plain)
    if out is not None:
        return out
    out = torch.empty_like(x)
    if rotary_dim < x.shape[-1]:
        out[..., rotary_dim:] = x[..., rotary_dim:]
    shared = x.dim() >= 2 and all(n == 1 for n in cos.shape[:-2]) and x.is_contiguous()
    # Blocks only on one thread: with several, each op of each block is a parallel region,
    # and on a shared CPU every region waits for a thread the OS has descheduled (35-55x a
    # clone with the other core busy, against 2-3x for a few whole-tensor ops).
    if not shared or x.numel() < 2 * BLOCK_ELEMENTS or torch.get_num_threads() > 1:
        _rotate_halves_into(x, cos, sin, out, rotary_dim, interleaved)
    else:
        _rotate_blocked(x, cos, sin, out, rotary_dim, interleaved)
    return out


def _rotate_functional(x: Any, cos: Any, sin: Any, rotary_dim: int, interleaved: bool) -> Any:
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


def _rotate_into(x: Any, big_c: Any, big_s: Any, out: Any, tmp: Any, interleaved: bool) -> None:
    """``out = x·C + swap(x)·S`` with ``swap`` exchanging the two members of each pair; every
    product and the sum rounded once (no fused multiply-add), as HF's expression is."""
    import torch

    h = x.shape[-1] // 2
    torch.mul(x, big_c, out=out)
    if interleaved:
        # x: [x0 x1 x2 x3] -> swap(x)·S = [-x1·s0, x0·s0, -x3·s1, x2·s1]
        torch.mul(x[..., 1::2], big_s[..., 0::2], out=tmp[..., 0::2])
        torch.mul(x[..., 0::2], big_s[..., 1::2], out=tmp[..., 1::2])
    else:
        # x: [x0 x1 | x2 x3] -> swap(x)·S = [-x2·s0, -x3·s1 | x0·s0, x1·s1]
        torch.mul(x[..., h:], big_s[..., :h], out=tmp[..., :h])
        torch.mul(x[..., :h], big_s[..., h:], out=tmp[..., h:])
    out.add_(tmp)


def _rotate_halves_into(x: Any, cos: Any, sin: Any, out: Any, rotary_dim: int,
                        interleaved: bool) -> None:
    """The unblocked eager rotation on half-width tables (few dispatches: small inputs, decode).
    Two products and a sum, each rounded: bit for bit HF's ``q·cos + rotate_half(q)·sin``."""
    import torch

    h = rotary_dim // 2
    if interleaved:
        a, b = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
        o1, o2 = out[..., 0:rotary_dim:2], out[..., 1:rotary_dim:2]
    else:
        a, b = x[..., :h], x[..., h:rotary_dim]
        o1, o2 = out[..., :h], out[..., h:rotary_dim]
    if x.dtype == cos.dtype:
        t = torch.mul(b, sin)
        torch.mul(a, cos, out=o1)
        o1.sub_(t)
        torch.mul(a, sin, out=t)
        torch.mul(b, cos, out=o2)
        o2.add_(t)
    else:  # narrower x: float32 arithmetic (type promotion), one rounding into out
        t = torch.mul(a, cos)
        t.sub_(torch.mul(b, sin))
        o1.copy_(t)
        torch.mul(b, cos, out=t)
        t.add_(torch.mul(a, sin))
        o2.copy_(t)


def _rotate_blocked(x: Any, cos: Any, sin: Any, out: Any, rotary_dim: int,
                    interleaved: bool) -> None:
    """``out = x·C + swap(x)·S`` with full-width tables ``C = [c, c]``, ``S = [-s, s]``
    (negating ``s`` is exact), processed in cache-sized blocks (:data:`BLOCK_ELEMENTS`) of
    ``rows`` sequence positions of ``group`` leading slices, so that the four passes run in cache
    and main memory sees about one read of ``x`` and one write of the output, as a copy does.
    bfloat16/float16 blocks are widened to float32 in cache and rounded once."""
    import torch

    dim, seq = x.shape[-1], x.shape[-2]
    if interleaved:  # [c0 c0 c1 c1 ..], [-s0 s0 -s1 s1 ..]
        big_c = torch.stack((cos, cos), dim=-1).flatten(-2)
        big_s = torch.stack((-sin, sin), dim=-1).flatten(-2)
    else:  # [c0 c1 .. c0 c1 ..], [-s0 -s1 .. s0 s1 ..]
        big_c = torch.cat((cos, cos), dim=-1)
        big_s = torch.cat((-sin, sin), dim=-1)
    wide = big_c.dtype
    big_c = big_c.expand(*big_c.shape[:-2], seq, rotary_dim).reshape(seq, rotary_dim)
    big_s = big_s.expand(*big_s.shape[:-2], seq, rotary_dim).reshape(seq, rotary_dim)
    n_lead = 1
    for n in x.shape[:-2]:
        n_lead *= int(n)
    x3, o3 = x.reshape(n_lead, seq, dim), out.reshape(n_lead, seq, dim)
    rows = max(1, min(seq, BLOCK_ELEMENTS // dim))
    group = max(1, BLOCK_ELEMENTS // (seq * dim)) if rows == seq else 1

    def scratch() -> Any:
        return torch.empty((group, rows, rotary_dim), dtype=wide, device=x.device)

    tmp = scratch()
    same = x.dtype == wide
    xw, ow = (None, None) if same else (scratch(), scratch())
    for g0 in range(0, n_lead, group):
        g1 = min(n_lead, g0 + group)
        for s0 in range(0, seq, rows):
            s1 = min(seq, s0 + rows)
            xs, os_ = x3[g0:g1, s0:s1, :rotary_dim], o3[g0:g1, s0:s1, :rotary_dim]
            c, sn, t = big_c[s0:s1], big_s[s0:s1], tmp[: g1 - g0, : s1 - s0]
            if xw is None or ow is None:
                _rotate_into(xs, c, sn, os_, t, interleaved)
            else:
                xb, ob = xw[: g1 - g0, : s1 - s0], ow[: g1 - g0, : s1 - s0]
                xb.copy_(xs)
                _rotate_into(xb, c, sn, ob, t, interleaved)
                os_.copy_(ob)


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


def _rotate_native(x: Any, cos: Any, sin: Any, rotary_dim: int, interleaved: bool, *,
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
    if (xcode is None or wcode is None or wcode > 1 or sin.dtype != cos.dtype
            or (xcode == 1 and wcode == 0)  # float64 x rotates in float64 (type promotion)
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


# -- DTensor ---------------------------------------------------------------------------------------
def _is_dtensor(x: Any) -> bool:
    import sys

    # getattr: another thread may be importing the module (transformers does), still without
    # DTensor, and then no DTensor exists yet.
    cls = getattr(sys.modules.get("torch.distributed.tensor"), "DTensor", None)
    return cls is not None and isinstance(x, cls)


def _rotate_dtensor(x: Any, cos: Any, sin: Any, *, rotary_dim: int, interleaved: bool) -> Any:
    """A ``DTensor`` (sharded on batch, heads or sequence): each rank rotates its local block
    with the matching rows of the (replicated, plain) tables; no communication. The pair axis
    must not be sharded."""
    from torch.distributed.tensor import DTensor, Shard
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    if _is_dtensor(cos) or _is_dtensor(sin):
        raise TypeError("rotate: positions must be a plain tensor (or None) when x is a DTensor")
    if any(isinstance(p, Shard) and p.dim % x.ndim == x.ndim - 1 for p in x.placements):
        raise ValueError(f"rotate: x is a DTensor sharded on its last (dim) axis "
                         f"{x.placements}; rotation mixes pairs across that axis, shard batch, "
                         f"heads or sequence instead")
    shape = (*x.shape[:-1], cos.shape[-1])
    local_shape, offsets = compute_local_shape_and_global_offset(shape, x.device_mesh,
                                                                 x.placements)
    index = tuple(slice(o, o + n) for o, n in zip(offsets[:-1], local_shape[:-1], strict=True))
    c, s = cos.expand(shape)[index], sin.expand(shape)[index]
    local = rotate(x.to_local(), c, s, rotary_dim=rotary_dim, interleaved=interleaved)
    return DTensor.from_local(local, x.device_mesh, x.placements, run_check=False,
                              shape=x.shape, stride=x.stride())

