"""PyTorch fast paths of the rope engine, reached only through :mod:`._delegation`.

Every path here is bit for bit the generic rotation of :mod:`._funcs` (Hugging Face's
``q·cos + rotate_half(q)·sin``: two products and a sum, each rounded once), only faster, and
uses torch's own operators alone (native kernels are plugins: :mod:`._kernels`):

* eager ``out=`` ops into one preallocated output, cache-blocked for large inputs;
* the plain expression where autograd, forward AD, a tracer or a placeholder needs it;
* a ``DTensor`` rotated shard by shard, without communication.

Also the torch answers to the questions asked before a table is kept (inference mode) or values
are read (``aminmax``), and the fusion boundary used under ``torch.compile``.
"""

from __future__ import annotations

import sys
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ..backends._torch import is_placeholder

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
    # (is_exporting: torch >= 2.6; before it, export is not told apart and takes the boundary)
    if not compiler.is_compiling() or getattr(compiler, "is_exporting", bool)():
        return arrays
    if not constant:
        return _stacked(arrays)
    from peregistry.rope._torch_op import materialize as op

    return tuple(op(a) for a in arrays)


def _stacked(arrays: tuple[Any, ...]) -> tuple[Any, ...]:
    """``(cos, sin, ...)`` pairs, each stacked into one buffer and taken apart again: inductor
    writes a stack's inputs once (on the CPU, several times faster with real-valued positions,
    as with the op: docs/benchmarks.md, "Figures moved from docstrings"), and stacking is
    differentiable in every mode."""
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
           eager: bool = False, cdt: Any = None, xp: Any = None) -> Any:
    """Torch rotation, bit for bit Hugging Face's ``q·cos + rotate_half(q)·sin``.

    Under ``torch.compile`` (or with autograd) the plain expression, which inductor fuses into
    one kernel. Eager: ``out=`` ops into one preallocated output (blocked for large inputs, see
    :func:`_rotate_blocked`). ``cdt`` and ``xp`` are the dispatch's arguments
    (:func:`._delegation.rotation` hands this function to :class:`~peregistry.rope.RotaryTables`);
    the rotation runs in the tables' dtype, which is ``cdt``.
    """
    torch = sys.modules["torch"]  # imported (x is a tensor); a dict read, not an import
    # The common case first, in few calls (it is paid on every layer of every decode step): a
    # plain tensor, eager, outside torch.func transforms, where no tensor can be a wrapper.
    # ``eager``: the caller's is_tracing(x) saw that nothing compiles or traces.
    plain = (type(x) is torch.Tensor
             and (eager or (not torch.compiler.is_compiling() and not torch.jit.is_tracing()))
             and torch._C._functorch.peek_interpreter_stack() is None)
    if not plain:
        if _is_dtensor(x):
            return _rotate_dtensor(x, cos, sin, rotary_dim=rotary_dim, interleaved=interleaved)
        # Compiled, traced (torch.jit.trace records torch ops), a placeholder, or a batched
        # table with a plain x under torch.func.vmap (the out= ops have no batching rule).
        if (torch.compiler.is_compiling() or torch.jit.is_tracing() or is_placeholder(x)
                or is_placeholder(cos) or is_placeholder(sin)):
            return rotate_functional(x, cos, sin, rotary_dim, interleaved)
    # Inside forward_ad.dual_level(), dual tensors need the plain expression (the out= ops
    # would drop their tangents); torch has no public "is a level open" question that is cheap
    # enough here (unpack_dual of three tensors costs microseconds: docs/benchmarks.md);
    # docs/architecture.md lists it.
    fwad = sys.modules.get("torch.autograd.forward_ad")
    if ((fwad is not None and fwad._current_level >= 0)
            or (torch.is_grad_enabled() and (
                x.requires_grad or cos.requires_grad or sin.requires_grad))):
        return rotate_functional(x, cos, sin, rotary_dim, interleaved)
    out = torch.empty_like(x)
    if rotary_dim < x.shape[-1]:
        out[..., rotary_dim:] = x[..., rotary_dim:]
    # (cos.shape[:-2] all ones: a torch.Size's product is 1)
    shared = x.dim() >= 2 and cos.shape[:-2].numel() == 1 and x.is_contiguous()
    # Blocks only on one thread: with several, each op of each block is a parallel region,
    # and on a shared CPU every region waits for a thread the OS has descheduled (many times
    # slower than a few whole-tensor ops with the other core busy: docs/benchmarks.md).
    if not shared or x.numel() < 2 * BLOCK_ELEMENTS or torch.get_num_threads() > 1:
        _rotate_halves_into(x, cos, sin, out, rotary_dim, interleaved)
    else:
        _rotate_blocked(x, cos, sin, out, rotary_dim, interleaved)
    return out


def rotate_functional(x: Any, cos: Any, sin: Any, rotary_dim: int, interleaved: bool) -> Any:
    """The plain expression (differentiable, traceable), as Hugging Face writes it."""
    torch = sys.modules["torch"]
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

