"""The rotation-kernel checks that need torch (:mod:`peregistry.testing.kernels`): where a
derivative can be asked for (autograd, forward-mode AD, ``torch.func``) and under
``torch.compile`` and ``make_fx``, a kernel declines or keeps every derivative and value."""

from __future__ import annotations

import os
import types
import warnings
from collections.abc import Callable
from typing import Any

from ._kernel_common import Counting, first, generic, tables

__all__ = ["check_kernel_compiled", "check_kernel_derivatives"]


# -- derivatives (torch) ----------------------------------------------------------------------
class _Declines(Counting):
    def __init__(self) -> None:
        self.calls = self.answered = self.ulps = 0

    def rotate(self, x: Any, cos: Any, sin: Any, *, layout: str) -> Any:
        return None


def _via_kernel(kernel: Counting, layout: str, xp: Any) -> Callable[[Any, Any, Any], Any]:
    """The rotation as the core makes it: the kernel's answer, else the generic rotation."""
    def rotate(x: Any, cos: Any, sin: Any) -> Any:
        out = kernel.rotate(x, cos, sin, layout=layout)
        return generic(x, cos, sin, layout, xp) if out is None else out
    return rotate


def _close(a: Any, b: Any, what: str, ulps: int) -> str | None:
    import torch

    if a is None or b is None:
        return None if a is None and b is None else \
            f"{what}: {'no' if a is None else 'a'} derivative, should be {'none' if b is None else 'one'}"
    a, b = a.detach().double(), b.detach().double()
    tol = max(ulps, 1) * torch.finfo(torch.float32).eps * (1 + b.abs())
    if a.shape != b.shape or not bool(((a - b).abs() <= tol).all()):
        return f"{what}: differs from the generic rotation's by {float((a - b).abs().max()):.3g}"
    return None


def check_kernel_derivatives(kernel: Counting, backend: Any) -> str | None:
    """Where a derivative can be asked for (autograd, forward-mode AD, ``torch.func`` grad,
    vmap and jvp), the kernel declines or keeps it: every derivative equals the generic one."""
    if backend.name != "torch":
        return "-"
    import torch
    import torch.autograd.forward_ad as fwad

    with warnings.catch_warnings():
        # (torch.func's own modules use torch.jit.script, deprecated in torch 2.13, on import)
        warnings.filterwarnings("ignore", message=".*torch.jit.script.* is deprecated",
                                category=DeprecationWarning)
        return _derivatives(kernel, backend.namespace(), torch, fwad)


def _derivatives(kernel: Counting, xp: Any, torch: Any, fwad: Any) -> str | None:
    import numpy as np

    rng = np.random.default_rng(3)
    x0 = torch.from_numpy(rng.standard_normal((2, 5, 16)).astype(np.float32))
    c, s = (torch.from_numpy(a) for a in tables(rng, (5, 8), np.float32))
    tang = torch.from_numpy(rng.standard_normal((2, 5, 16)).astype(np.float32))
    results = []
    for layout in ("half", "interleaved"):
        fast = _via_kernel(kernel, layout, xp)
        ref = _via_kernel(_Declines(), layout, xp)
        grads = []
        for f in (fast, ref):
            x, cos, sin = (t.clone().requires_grad_(True) for t in (x0, c, s))
            (f(x, cos, sin) * tang).sum().backward()
            grads.append((x.grad, cos.grad, sin.grad))
        for name, a, b in zip(("x", "cos", "sin"), *grads, strict=True):
            results.append(_close(a, b, f"autograd, d/d{name}, {layout}", kernel.ulps))
        outs = []
        for f in (fast, ref):
            with fwad.dual_level():
                y = f(fwad.make_dual(x0, tang), c, s)
                outs.append(fwad.unpack_dual(y).tangent)
        results.append(_close(outs[0], outs[1], f"forward-mode AD tangent, {layout}", kernel.ulps))
        g = [torch.func.grad(lambda x, f=f: (f(x, c, s) * tang).sum())(x0) for f in (fast, ref)]
        results.append(_close(g[0], g[1], f"torch.func.grad, {layout}", kernel.ulps))
        j = [torch.func.jvp(lambda x, f=f: f(x, c, s), (x0,), (tang,))[1] for f in (fast, ref)]
        results.append(_close(j[0], j[1], f"torch.func.jvp, {layout}", kernel.ulps))
        v = [torch.func.vmap(lambda x, f=f: f(x, c, s))(x0) for f in (fast, ref)]
        results.append(_close(v[0], v[1], f"torch.func.vmap, {layout}", kernel.ulps))
    return first(iter(results))


def check_kernel_compiled(kernel: Counting, backend: Any) -> str | None:
    """Under ``torch.compile`` (fullgraph, static and dynamic shapes; with a gradient too) the
    kernel's rotation gives eager's values and derivatives, and a graph ``make_fx`` records of
    it computes new inputs' rotations (the kernel ran through torch's dispatcher, or declined)."""
    if backend.name != "torch":
        return "-"
    import numpy as np
    import torch

    compiler = os.environ.get("PEREGISTRY_TORCH_COMPILE_BACKEND", "inductor")
    rng = np.random.default_rng(4)
    results = []
    for layout in ("half", "interleaved"):
        fast = _via_kernel(kernel, layout, backend.namespace())
        for dynamic in (False, True):
            # a code object of its own per variant: Dynamo keeps its cache (and its limit of
            # recompiles) per code object, and the caller's compiled code stays as it was
            own = types.FunctionType(fast.__code__.replace(), fast.__globals__,
                                     f"rotate_{layout}_{dynamic}", None, fast.__closure__)
            compiled = torch.compile(own, fullgraph=True, dynamic=dynamic, backend=compiler)
            for seq in (7, 12):
                x = torch.from_numpy(rng.standard_normal((2, seq, 32)).astype(np.float32))
                c, s = (torch.from_numpy(a) for a in tables(rng, (seq, 16), np.float32))
                want = generic(x, c, s, layout, backend.namespace())
                got = compiled(x, c, s)
                results.append(_close(got, want, f"torch.compile(dynamic={dynamic}) values, "
                                                  f"seq={seq}, {layout}", kernel.ulps))
                xg = x.clone().requires_grad_(True)
                compiled(xg, c, s).sum().backward()
                xr = x.clone().requires_grad_(True)
                generic(xr, c, s, layout, backend.namespace()).sum().backward()
                results.append(_close(xg.grad, xr.grad, f"torch.compile(dynamic={dynamic}) "
                                                        f"gradient, {layout}", kernel.ulps))
        # make_fx records the ops torch's dispatcher sees: a kernel that computes outside it
        # must decline there, or its answer is frozen into the graph as a constant
        from torch.fx.experimental.proxy_tensor import make_fx

        x1, x2 = (torch.from_numpy(rng.standard_normal((2, 9, 32)).astype(np.float32))
                  for _ in range(2))
        c, s = (torch.from_numpy(a) for a in tables(rng, (9, 16), np.float32))
        graph = make_fx(fast)(x1, c, s)
        results.append(_close(graph(x2, c, s), generic(x2, c, s, layout, backend.namespace()),
                              f"make_fx's graph run on new values, {layout}", kernel.ulps))
    return first(iter(results))
