"""PyTorch adapter: default dtype from ``torch.get_default_dtype()``, ``torch.compile`` as jit."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from ._base import Backend
from ._kernel import broadcast_strides, gomp_parallel_address, load_kernel

#: ``torch.compile`` backend used by the conformance suite's jit check. ``inductor`` generates
#: and compiles C++; ``aot_eager`` checks full-graph capture without code generation.
COMPILE_BACKEND_ENV = "PEREGISTRY_TORCH_COMPILE_BACKEND"


def _import_inductor_quietly() -> None:
    """Import inductor with its one import-time DeprecationWarning silenced: torch 2.13's
    ``torch.utils.mkldnn`` (pulled in by ``torch._inductor.compile_fx``) still decorates with
    ``torch.jit.script_method``, so the *first* inductor compile in a process fails when warnings
    are errors, whatever is being compiled. Nothing else is filtered."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.script_method` is deprecated",
                                category=DeprecationWarning)
        import torch._inductor.compile_fx  # noqa: F401


#: Elements per block of the eager rotation: a block and its temporaries (~4 MiB in float32)
#: stay in the last-level cache while the four passes over it run.
BLOCK_ELEMENTS = 1 << 18


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


class TorchBackend(Backend):
    name = "torch"
    priority = 10

    def owns(self, x: Any) -> bool:
        import torch

        if isinstance(x, torch.Tensor):
            _materialize_op()
            return True
        return False

    def namespace(self) -> Any:
        import array_api_compat.torch as xp

        return xp

    def native(self) -> Any:
        import torch

        return torch

    def float_dtypes(self) -> Mapping[str, Any]:
        import torch

        return {
            "float16": torch.float16,
            "bfloat16": torch.bfloat16,
            "float32": torch.float32,
            "float64": torch.float64,
        }

    def default_float_dtype(self, device: Any = None) -> Any:
        import torch

        return torch.get_default_dtype()

    def wide_float_dtype(self, device: Any = None) -> Any:
        import torch

        if device is not None and torch.device(device).type == "mps":
            return torch.float32  # MPS has no float64
        return torch.float64

    def default_device(self) -> Any:
        import torch

        return torch.get_default_device()

    def from_numpy(self, a: Any, *, dtype: Any = None, device: Any = None) -> Any:
        import torch

        return torch.asarray(a, dtype=dtype, device=device)

    def to_numpy(self, x: Any) -> Any:
        import numpy as np
        import torch

        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            x = x.to(torch.float32)
        return np.asarray(x.numpy())

    def from_dlpack(self, x: Any, *, device: Any = None) -> Any:
        import torch

        out = torch.utils.dlpack.from_dlpack(x)
        return out if device is None else out.to(device)

    def prepare_params(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        return params

    def jit(self, fn: Callable[..., Any]) -> Callable[..., Any] | None:
        import torch

        backend = os.environ.get(COMPILE_BACKEND_ENV, "inductor")
        if backend == "inductor":
            _import_inductor_quietly()
        _materialize_op()
        return torch.compile(_own_code(fn), fullgraph=True, dynamic=False, backend=backend)

    def jit_counted(self, fn: Callable[..., Any]) -> tuple[Callable[..., Any] | None,
                                                           Callable[[], int]]:
        # Dynamo replays Python side effects on every call, so count compiled frames instead.
        import torch
        from torch._dynamo.testing import CompileCounterWithBackend

        backend = os.environ.get(COMPILE_BACKEND_ENV, "inductor")
        if backend == "inductor":
            _import_inductor_quietly()
        counter = CompileCounterWithBackend(backend)
        compiled = torch.compile(_own_code(fn), fullgraph=True, dynamic=False, backend=counter)
        return compiled, lambda: int(counter.frame_count)

    def take(self, table: Any, idx: Any, *, axis: int) -> Any:
        """Advanced indexing with N-d indices: one op, where the standard's 1-D ``take`` needs a
        flatten, a ``take`` (array-api-compat's also normalizes negative indices) and a
        reshape; it matters for a decode step's gather of two table rows."""
        import torch

        if idx.dtype not in (torch.int64, torch.int32):  # uint8/bool would index as a mask
            idx = idx.to(torch.int64)
        return table[idx] if axis == 0 else table[:, idx]

    def materialize(self, *arrays: Any) -> tuple[Any, ...]:
        """Under ``torch.compile``, pass the arrays through an opaque custom op: inductor would
        otherwise fuse a cos/sin table into the elementwise rotation and recompute its
        trigonometry for every head and batch element."""
        import torch

        if not torch.compiler.is_compiling():
            return arrays
        op = _materialize_op()
        if op is None:  # not defined yet, and it cannot be defined while Dynamo traces
            return arrays
        return tuple(op(a) for a in arrays)

    def is_tracing(self, x: Any) -> bool:
        import torch

        return bool(torch.compiler.is_compiling()) or _placeholder(x)

    def cacheable(self, x: Any) -> bool:
        return not self.is_tracing(x) and not (hasattr(x, "is_inference") and x.is_inference())

    def cache_scope(self) -> AbstractContextManager[Any]:
        import torch

        if torch.is_inference_mode_enabled():
            return torch.inference_mode(False)
        return nullcontext()

    def int_bounds(self, x: Any) -> tuple[int, int] | None:
        """One pass (``aminmax``); torch stages nothing eagerly, so callers that checked
        ``is_tracing`` on ``x`` may read it."""
        import torch

        if torch.compiler.is_compiling():
            return None
        lo, hi = torch.aminmax(x)
        return int(lo), int(hi)

    def reads_cheaply(self, x: Any) -> bool:
        return bool(getattr(x, "is_cpu", True))

    def grad(self, fn: Callable[[Mapping[str, Any]], Any]) -> Callable[[Mapping[str, Any]],
                                                                       dict[str, Any]] | None:
        """Reverse-mode autograd: each param is detached into a fresh leaf that requires grad,
        ``fn`` runs with grad enabled, and ``torch.autograd.grad`` returns the gradients (zeros
        for a param ``fn`` does not use)."""
        import torch

        def g(params: Mapping[str, Any]) -> dict[str, Any]:
            leaves = {k: v.detach().requires_grad_(True) for k, v in params.items()}
            with torch.enable_grad():
                out = fn(leaves)
                if out.ndim != 0:
                    raise ValueError(f"grad: fn must return a scalar, got shape "
                                     f"{tuple(out.shape)}")
                grads = torch.autograd.grad(out, list(leaves.values()), allow_unused=True)
            return {k: torch.zeros_like(v) if gk is None else gk
                    for (k, v), gk in zip(leaves.items(), grads, strict=True)}

        return g

    def apply_rotary(self, x: Any, cos: Any, sin: Any, *, rotary_dim: int,
                     interleaved: bool) -> Any | None:
        """Native torch rotation, bit for bit Hugging Face's ``q·cos + rotate_half(q)·sin``.

        Under ``torch.compile`` (or with autograd) the plain expression, which inductor fuses into
        one kernel. Eager, the rotation is ``out = x·C + swap(x)·S`` with full-width tables
        ``C = [c, c]``, ``S = [-s, s]`` (two products and a sum, each rounded as in HF; negating
        ``s`` is exact) written with ``out=`` ops into one preallocated output. Large inputs are
        processed in cache-sized blocks (:data:`BLOCK_ELEMENTS`), so that the four passes run in
        cache and main memory sees about one read of ``x`` and one write of the output, as a copy
        does. bfloat16/float16 blocks are widened to float32 in cache and rounded once.
        """
        import torch

        if _is_dtensor(x):
            return _rotate_dtensor(self, x, cos, sin, rotary_dim=rotary_dim,
                                   interleaved=interleaved)
        dim = x.shape[-1]
        h = rotary_dim // 2
        functional = (torch.compiler.is_compiling() or _forward_ad_active() or _placeholder(x)
                      or (torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad
                                                       or sin.requires_grad)))
        if functional:
            if interleaved:
                a, b = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
            else:
                a, b = x[..., :h], x[..., h:rotary_dim]
            o1 = a * cos - b * sin
            o2 = b * cos + a * sin
            rot = (torch.stack((o1, o2), dim=-1).flatten(-2) if interleaved
                   else torch.cat((o1, o2), dim=-1))
            if rotary_dim < dim:
                rot = torch.cat((rot, x[..., rotary_dim:].to(rot.dtype)), dim=-1)
            return rot.to(x.dtype)
        out = _rotate_native(x, cos, sin, rotary_dim, interleaved)
        if out is not None:
            return out
        out = torch.empty_like(x)
        if rotary_dim < dim:
            out[..., rotary_dim:] = x[..., rotary_dim:]
        seq = x.shape[-2] if x.dim() >= 2 else 1
        shared = x.dim() >= 2 and all(n == 1 for n in cos.shape[:-2]) and x.is_contiguous()
        if not shared or x.numel() < 2 * BLOCK_ELEMENTS:
            _rotate_halves_into(x, cos, sin, out, rotary_dim, interleaved)
            return out
        # Full-width tables in the pair layout: C = [c, c], S = [-s, s] (interleaved: c0 c0 ..).
        if interleaved:
            big_c = torch.stack((cos, cos), dim=-1).flatten(-2)
            big_s = torch.stack((-sin, sin), dim=-1).flatten(-2)
        else:
            big_c = torch.cat((cos, cos), dim=-1)
            big_s = torch.cat((-sin, sin), dim=-1)
        wide = big_c.dtype
        same = x.dtype == wide
        lead = tuple(x.shape[:-2])
        # Cache-blocked: blocks of `rows` sequence positions of `group` leading slices.
        big_c = big_c.expand(*big_c.shape[:-2], seq, rotary_dim).reshape(seq, rotary_dim)
        big_s = big_s.expand(*big_s.shape[:-2], seq, rotary_dim).reshape(seq, rotary_dim)
        n_lead = 1
        for n in lead:
            n_lead *= int(n)
        x3, o3 = x.reshape(n_lead, seq, dim), out.reshape(n_lead, seq, dim)
        rows = max(1, min(seq, BLOCK_ELEMENTS // dim))
        group = max(1, BLOCK_ELEMENTS // (seq * dim)) if rows == seq else 1
        tmp = torch.empty((group, rows, rotary_dim), dtype=wide, device=x.device)
        xw = ow = None
        if not same:
            xw = torch.empty((group, rows, rotary_dim), dtype=wide, device=x.device)
            ow = torch.empty((group, rows, rotary_dim), dtype=wide, device=x.device)
        for g0 in range(0, n_lead, group):
            g1 = min(n_lead, g0 + group)
            for s0 in range(0, seq, rows):
                s1 = min(seq, s0 + rows)
                xs = x3[g0:g1, s0:s1, :rotary_dim]
                os_ = o3[g0:g1, s0:s1, :rotary_dim]
                c, sn = big_c[s0:s1], big_s[s0:s1]
                t = tmp[: g1 - g0, : s1 - s0]
                if same:
                    _rotate_into(xs, c, sn, os_, t, interleaved)
                else:
                    assert xw is not None and ow is not None
                    xb, ob = xw[: g1 - g0, : s1 - s0], ow[: g1 - g0, : s1 - s0]
                    xb.copy_(xs)
                    _rotate_into(xb, c, sn, ob, t, interleaved)
                    os_.copy_(ob)
        return out


_NATIVE_DTYPES: dict[Any, int] = {}


def _rotate_native(x: Any, cos: Any, sin: Any, rotary_dim: int, interleaved: bool) -> Any | None:
    """The rotation by the fused C kernel (:mod:`peregistry.backends._kernel`): one pass over
    memory on ``torch.get_num_threads()`` threads, bit for bit the eager expression below. None
    when it does not apply (kernel not built or switched off, not a CPU tensor, not
    C-contiguous, a dtype it lacks, tables that need more than broadcasting)."""
    import torch

    kernel = load_kernel()
    if kernel is None:
        return None
    if not _NATIVE_DTYPES:
        _NATIVE_DTYPES.update({torch.float32: 0, torch.float64: 1, torch.bfloat16: 2})
    xcode = _NATIVE_DTYPES.get(x.dtype)
    wcode = _NATIVE_DTYPES.get(cos.dtype)
    if (xcode is None or wcode is None or wcode > 1 or sin.dtype != cos.dtype
            or (xcode == 1 and wcode == 0)  # float64 x rotates in float64 (type promotion)
            or not (_plain(x) and _plain(cos) and _plain(sin))
            or not (x.is_cpu and cos.is_cpu and sin.is_cpu)
            or not x.is_contiguous() or x.is_neg() or cos.is_neg() or sin.is_neg()
            or x.dim() - 1 > 16 or cos.shape[-1] != rotary_dim // 2
            or sin.shape[-1] != rotary_dim // 2 or cos.stride(-1) != 1 or sin.stride(-1) != 1):
        return None
    lead = tuple(x.shape[:-1])
    cstr = broadcast_strides(tuple(cos.shape), cos.stride(), lead)
    sstr = broadcast_strides(tuple(sin.shape), sin.stride(), lead)
    if cstr is None or sstr is None:
        return None
    threads = torch.get_num_threads()
    gomp = _torch_gomp() if threads > 1 else 0
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    kernel.rotate(x.data_ptr(), out.data_ptr(), cos.data_ptr(), sin.data_ptr(), xcode, wcode,
                  x.shape[-1], rotary_dim, interleaved, lead, cstr, sstr, threads, gomp)
    return out


def _wrapped(t: Any) -> bool:
    """``t`` (a plain ``torch.Tensor``) is a functionalization or functorch (vmap, grad, jvp)
    wrapper. Such wrappers only exist while a torch.func transform runs (its interpreter stack
    is not empty) or while compiling; checking the stack first keeps eager calls cheap."""
    import torch

    fc = torch._C._functorch
    if fc.peek_interpreter_stack() is None and not torch.compiler.is_compiling():
        return False
    return bool(torch._is_functional_tensor(t) or fc.is_functorch_wrapped_tensor(t))


def _plain(t: Any) -> bool:
    """A real tensor with its own memory: not a subclass (FakeTensor, DTensor, ...), not a
    functionalization or functorch (vmap, grad) wrapper, whose ``data_ptr`` is no buffer."""
    import torch

    return type(t) is torch.Tensor and not _wrapped(t)


def _placeholder(t: Any) -> bool:
    """A tensor without readable values: fake (also under functionalization), or wrapped by
    functorch's vmap/grad transforms."""
    import torch

    if type(t) is torch.Tensor:
        return _wrapped(t)
    if not isinstance(t, torch.Tensor):
        return False
    from torch._subclasses.fake_tensor import is_fake

    return bool(is_fake(t))


def _forward_ad_active() -> bool:
    """Inside ``torch.autograd.forward_ad.dual_level()``: dual tensors need the plain
    expression (the ``out=`` ops and the kernel would drop their tangents)."""
    import sys

    fwad = sys.modules.get("torch.autograd.forward_ad")
    return fwad is not None and getattr(fwad, "_current_level", -1) >= 0


def _torch_gomp() -> int:
    """``GOMP_parallel`` of the OpenMP runtime torch's intra-op threads belong to (0: none, use
    POSIX threads). Only when ATen's parallel backend is OpenMP (the default on Linux)."""
    import torch

    if torch._C.has_openmp:
        return gomp_parallel_address(os.path.dirname(torch.__file__))
    return 0


def _is_dtensor(x: Any) -> bool:
    import sys

    mod = sys.modules.get("torch.distributed.tensor")
    return mod is not None and isinstance(x, mod.DTensor)


def _rotate_dtensor(backend: TorchBackend, x: Any, cos: Any, sin: Any, *, rotary_dim: int,
                    interleaved: bool) -> Any:
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
    local = backend.apply_rotary(x.to_local(), c, s, rotary_dim=rotary_dim,
                                 interleaved=interleaved)
    assert local is not None
    return DTensor.from_local(local, x.device_mesh, x.placements, run_check=False,
                              shape=x.shape, stride=x.stride())


_MATERIALIZE: Any = None


def _materialize_op() -> Any:
    """``peregistry::materialize``: a copy that inductor cannot see through (a fusion boundary),
    with the identity as its gradient. Defined once per process, eagerly (when the adapter
    first meets a tensor or compiles); None if asked first while Dynamo traces."""
    global _MATERIALIZE
    if _MATERIALIZE is None:
        import torch

        if torch.compiler.is_compiling():
            return None

        @torch.library.custom_op("peregistry::materialize", mutates_args=(),
                                 schema="(Tensor a) -> Tensor")
        def materialize(a: torch.Tensor) -> torch.Tensor:
            return a.clone()

        @materialize.register_fake
        def _(a: torch.Tensor) -> torch.Tensor:
            return torch.empty_like(a)

        def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
            return grad

        materialize.register_autograd(backward)
        _MATERIALIZE = materialize
    return _MATERIALIZE


def _own_code(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` with a code object of its own. Dynamo keeps compiled entries (and its limit of 8
    recompiles) per *code object*, and the conformance suite compiles the same check closure for
    every encoder in one process; a fresh code object gives each its own cache, so the 9th
    encoder checked is not a spurious "recompile limit exceeded" failure."""
    import types

    if not isinstance(fn, types.FunctionType):
        return fn
    new = types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                             fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    new.__qualname__ = fn.__qualname__
    new.__dict__.update(fn.__dict__)
    return new
