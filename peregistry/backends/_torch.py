"""PyTorch adapter: default dtype from ``torch.get_default_dtype()``, ``torch.compile`` as jit."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from ._base import Backend

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


class TorchBackend(Backend):
    name = "torch"
    priority = 10

    def owns(self, x: Any) -> bool:
        import torch

        return isinstance(x, torch.Tensor)

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
        return torch.compile(fn, fullgraph=True, dynamic=False, backend=backend)

    def jit_counted(self, fn: Callable[..., Any]) -> tuple[Callable[..., Any] | None,
                                                           Callable[[], int]]:
        # Dynamo replays Python side effects on every call, so count compiled frames instead.
        import torch
        from torch._dynamo.testing import CompileCounterWithBackend

        backend = os.environ.get(COMPILE_BACKEND_ENV, "inductor")
        if backend == "inductor":
            _import_inductor_quietly()
        counter = CompileCounterWithBackend(backend)
        compiled = torch.compile(fn, fullgraph=True, dynamic=False, backend=counter)
        return compiled, lambda: int(counter.frame_count)

    def is_tracing(self, x: Any) -> bool:
        import torch

        return bool(torch.compiler.is_compiling())

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
        """Native torch rotation. Eager: written into one preallocated output with ``out=`` and
        in-place ops (no concatenation, one half-size temporary for float32/float64);
        bfloat16/float16 inputs are promoted to the float32 tables inside each op and cast once
        when stored. Under ``torch.compile`` (or with autograd) the plain expression, which
        inductor fuses into one kernel."""
        import torch

        dim = x.shape[-1]
        h = rotary_dim // 2
        if interleaved:
            a, b = x[..., 0:rotary_dim:2], x[..., 1:rotary_dim:2]
        else:
            a, b = x[..., :h], x[..., h:rotary_dim]
        functional = torch.compiler.is_compiling() or (
            torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad
                                         or sin.requires_grad))
        if functional:
            o1 = a * cos - b * sin
            o2 = b * cos + a * sin
            rot = (torch.stack((o1, o2), dim=-1).flatten(-2) if interleaved
                   else torch.cat((o1, o2), dim=-1))
            if rotary_dim < dim:
                rot = torch.cat((rot, x[..., rotary_dim:].to(rot.dtype)), dim=-1)
            return rot.to(x.dtype)
        out = torch.empty_like(x)
        if interleaved:
            o1, o2 = out[..., 0:rotary_dim:2], out[..., 1:rotary_dim:2]
        else:
            o1, o2 = out[..., :h], out[..., h:rotary_dim]
        # Two products and a sum, each rounded (no fused multiply-add): bit for bit what
        # Hugging Face's q·cos + rotate_half(q)·sin gives in float32.
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
        if rotary_dim < dim:
            out[..., rotary_dim:] = x[..., rotary_dim:]
        return out
