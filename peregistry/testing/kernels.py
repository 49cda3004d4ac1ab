"""Holding a rotation kernel to the generic rotation: :func:`check_rotation_kernel`.

A rotation kernel (hook ``peregistry_rotation_kernels``, :mod:`peregistry.rope.kernels`) may
change how fast a rotation runs, never its result. Its ``rotate(x, cos, sin, *, layout)`` must
return a new array equal to :func:`peregistry.rope.apply_rotation` on the same arguments (bit
for bit unless the kernel declares ``ulps``), or ``None``. This module calls it, on every
selected backend, with what a model may give it: shapes from one pair to many heads, tables that
broadcast, transposed, stepped, expanded (zero-stride), negative-stride, Fortran-ordered and
unaligned arrays, every float dtype, NaN, infinities, signed zeros and denormals, read-only
inputs, eight threads at once, and, on torch, autograd, forward-mode AD, ``torch.func`` and
``torch.compile``, where a kernel that answers must keep every derivative. Each check is a row
of a :class:`~peregistry.testing.Report` whose message says what broke::

    from peregistry.testing import check_rotation_kernel

    report = check_rotation_kernel(MyKernel())
    assert report.ok, report
"""

from __future__ import annotations

import os
import threading
import types
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from ._report import Report, ReportRow

__all__ = ["check_rotation_kernel"]

#: The check functions, by name: ``fn(kernel, backend) -> str | None`` (None: passed, else what
#: broke; a check that does not apply to a backend returns ``"-"``).
_CHECKS: dict[str, Callable[[Any, Any], str | None]] = {}


def _check(fn: Callable[[Any, Any], str | None]) -> Callable[[Any, Any], str | None]:
    _CHECKS[fn.__name__] = fn
    return fn


def check_rotation_kernel(kernel: Any, *, backends: str | None = None) -> Report:
    """Run every kernel check on every selected backend (``backends``: as
    ``PEREGISTRY_BACKENDS``, default that variable or every installed backend).

    A check passes when each answer of the kernel equals the generic rotation (within
    ``kernel.ulps`` units in the last place of the output dtype, default 0) and has ``x``'s
    shape, dtype, namespace and device; declining (``None``) always passes. The report's
    ``declined`` row counts how often the kernel answered, so a kernel that silently declines
    everything is seen.
    """
    from ._core import selected_backends

    name = getattr(kernel, "name", None)
    if not isinstance(name, str) or not callable(getattr(kernel, "rotate", None)):
        raise TypeError(f"check_rotation_kernel: {kernel!r} is not a rotation kernel "
                        f"(needs a name and rotate(x, cos, sin, *, layout))")
    rows = []
    for backend in selected_backends(backends):
        counter = _Counting(kernel)
        for check, fn in _CHECKS.items():
            try:
                why = fn(counter, backend)
            except Exception as exc:  # a kernel that raises fails, it does not crash the run
                rows.append(ReportRow(name, backend.name, check, "error",
                                      f"{type(exc).__name__}: {exc}"))
                continue
            if why == "-":
                rows.append(ReportRow(name, backend.name, check, "exempt", "not on this backend"))
            else:
                rows.append(ReportRow(name, backend.name, check, "passed" if why is None
                                      else "failed", why or ""))
        rows.append(ReportRow(name, backend.name, "answered", "passed",
                              f"{counter.answered} of {counter.calls} calls answered, "
                              f"the rest declined"))
    return Report(tuple(rows))


class _Counting:
    """The kernel, counting its calls and answers (thread-safe enough for counts)."""

    def __init__(self, kernel: Any) -> None:
        self.kernel, self.calls, self.answered = kernel, 0, 0
        self.ulps = int(getattr(kernel, "ulps", 0))

    def rotate(self, x: Any, cos: Any, sin: Any, *, layout: str) -> Any:
        self.calls += 1
        out = self.kernel.rotate(x, cos, sin, layout=layout)
        if out is not None:
            self.answered += 1
        return out


# -- comparing with the generic rotation ------------------------------------------------------
def _generic(x: Any, cos: Any, sin: Any, layout: str, xp: Any = None) -> Any:
    from ..rope import apply_rotation

    return apply_rotation(x, cos, sin, layout=layout, xp=xp)  # type: ignore[arg-type]


def _to_numpy(backend: Any, a: Any) -> Any:
    """A float64 NumPy copy (bfloat16 arrives through float32, exactly)."""
    import numpy as np

    if hasattr(a, "resolve_neg"):  # a torch negated or conjugated view
        a = a.resolve_neg().resolve_conj()
    return np.asarray(backend.to_numpy(a), dtype=np.float64)


def _compare(kernel: _Counting, backend: Any, x: Any, cos: Any, sin: Any, layout: str,
             what: str) -> str | None:
    """Call the kernel; None if it declined or equals the generic rotation, else what broke."""
    import numpy as np

    before = [_to_numpy(backend, a).tobytes() for a in (x, cos, sin)]
    out = kernel.rotate(x, cos, sin, layout=layout)
    after = [_to_numpy(backend, a).tobytes() for a in (x, cos, sin)]
    for name, b, a in zip(("x", "cos", "sin"), before, after, strict=True):
        if a != b:
            return f"{what}: the kernel wrote into its input {name}"
    if out is None:
        return None
    want = _generic(x, cos, sin, layout)
    if out is x:
        return f"{what}: the kernel returned x itself, not a new array"
    if type(out) is not type(want) and not backend.owns(out):
        return f"{what}: out is a {type(out).__name__}, x a {type(x).__name__}"
    if tuple(out.shape) != tuple(want.shape) or out.dtype != want.dtype:
        return (f"{what}: out.shape={tuple(out.shape)} dtype={out.dtype}, but should be "
                f"{tuple(want.shape)} {want.dtype} (those of x)")
    if backend.device(out) != backend.device(x):
        return f"{what}: out on {backend.device(out)}, x on {backend.device(x)}"
    got, ref = _to_numpy(backend, out), _to_numpy(backend, want)
    # Equal values with equal signs (a -0.0 for a 0.0 is a different bit pattern, and breaks
    # 1/x and atan2 downstream); a NaN for a NaN, whatever its sign or payload (which IEEE 754
    # leaves to the implementation of each operation).
    bad = ~(((got == ref) & (np.signbit(got) == np.signbit(ref))) | (np.isnan(got) & np.isnan(ref)))
    if kernel.ulps and bad.any():
        eps = float(np.finfo(np.float32).eps) if "16" in str(out.dtype) or "32" in str(out.dtype) \
            else float(np.finfo(np.float64).eps)
        eps = {"bfloat16": 2.0 ** -7, "float16": 2.0 ** -10}.get(str(out.dtype).split(".")[-1], eps)
        scale = np.maximum(np.abs(ref), np.finfo(np.float64).tiny)
        bad &= ~(np.abs(got - ref) <= kernel.ulps * eps * scale)
    if bad.any():
        i = tuple(int(v) for v in np.argwhere(bad)[0])
        return (f"{what}: {int(bad.sum())} of {bad.size} elements differ from the generic "
                f"rotation (first at {i}: {got[i]!r}, should be {ref[i]!r}"
                f"{', within ' + str(kernel.ulps) + ' ulps' if kernel.ulps else ', bit for bit'})")
    return None


def _each_layout(kernel: _Counting, backend: Any, x: Any, cos: Any, sin: Any,
                 what: str) -> str | None:
    """:func:`_compare` in both layouts: the first that broke, or None."""
    for layout in ("half", "interleaved"):
        why = _compare(kernel, backend, x, cos, sin, layout, f"{what}, layout={layout}")
        if why:
            return why
    return None


def _first(results: Iterator[str | None]) -> str | None:
    for r in results:
        if r is not None:
            return r
    return None


# -- inputs -------------------------------------------------------------------------------------
def _tables(rng: Any, shape: tuple[int, ...], np_dtype: Any) -> tuple[Any, Any]:
    import numpy as np

    angle = rng.uniform(-50.0, 50.0, size=shape)
    return np.cos(angle).astype(np_dtype), np.sin(angle).astype(np_dtype)


def _dtype_pairs(backend: Any) -> list[tuple[str, str]]:
    """(x dtype, table dtype) pairs the backend holds: narrow x rotates in float32 tables,
    float32 and float64 x in their own dtype."""
    have = backend.float_dtypes()
    pairs = [("float32", "float32"), ("float16", "float32"), ("bfloat16", "float32")]
    if ("float64" in have and backend.name != "jax") or _jax_x64(backend):
        pairs.append(("float64", "float64"))
    return [p for p in pairs if p[0] in have and p[1] in have]


def _jax_x64(backend: Any) -> bool:
    """JAX with x64 enabled (its widest float is then float64)."""
    return backend.name == "jax" and str(backend.wide_float_dtype()).endswith("float64")


def _array(backend: Any, a: Any, dtype: str) -> Any:
    """``a`` (NumPy float64) on the backend in ``dtype``, cast on the backend side (NumPy has
    no bfloat16)."""
    import numpy as np

    xp = backend.namespace()
    wide = backend.from_numpy(np.asarray(a, dtype=np.float32 if dtype != "float64" else np.float64))
    return wide if str(wide.dtype).endswith(dtype) else xp.astype(wide, getattr(xp, dtype))


# -- the checks ---------------------------------------------------------------------------------
_SHAPES = [  # (x shape, table shape): one pair, decode, prefill, heads, per-batch tables
    ((1, 2), (1, 1)),
    ((3, 8), (3, 4)),
    ((2, 4, 1, 64), (1, 32)),
    ((2, 3, 17, 12), (17, 6)),
    ((2, 3, 17, 12), (2, 1, 17, 6)),
    ((1, 8, 33, 128), (1, 1, 33, 64)),
    ((0, 5, 8), (5, 4)),
]


@_check
def check_kernel_values(kernel: _Counting, backend: Any) -> str | None:
    """Shapes, broadcast tables, both layouts, every dtype pair: equal to the generic rotation."""
    import numpy as np

    rng = np.random.default_rng(0)
    for xs, ts in _SHAPES:
        for xdt, tdt in _dtype_pairs(backend):
            x = _array(backend, rng.standard_normal(xs), xdt)
            c, s = _tables(rng, ts, np.float64)
            cos, sin = _array(backend, c, tdt), _array(backend, s, tdt)
            why = _each_layout(kernel, backend, x, cos, sin, f"x {xs} {xdt}, tables {ts} {tdt}")
            if why:
                return why
    return None


@_check
def check_kernel_special_values(kernel: _Counting, backend: Any) -> str | None:
    """NaN, infinities, signed zeros, denormals and the largest finite values in x and tables."""
    import numpy as np

    rng = np.random.default_rng(1)
    for xdt, tdt in _dtype_pairs(backend):
        fin = np.finfo(np.float64 if xdt == "float64" else np.float32)
        tiny = float(fin.smallest_subnormal) if xdt in ("float32", "float64") else 1e-7
        big = {"float16": 6.0e4, "bfloat16": 3.0e38}.get(xdt, float(fin.max))
        special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, big, -big, 1.0])
        x = rng.choice(special, size=(4, 6, 16))
        c, s = _tables(rng, (6, 8), np.float64)
        c[0, :3], s[0, :3] = [0.0, -0.0, np.nan], [-0.0, 0.0, 1.0]
        with np.errstate(all="ignore"):  # inf - inf is NaN on purpose here
            x_, cos, sin = (_array(backend, x, xdt), _array(backend, c, tdt),
                            _array(backend, s, tdt))
            why = _each_layout(kernel, backend, x_, cos, sin, f"special values, {xdt}")
            if why:
                return why
    return None


def _strided(backend: Any, rng: Any) -> Iterator[tuple[str, Any, Any, Any]]:
    """``(what, x, cos, sin)`` with x (and tables) of unusual memory layouts, as the framework
    makes them: transposed, stepped, expanded, negative strides, Fortran order, unaligned."""
    import numpy as np

    xp = backend.namespace()
    c, s = _tables(rng, (6, 8), np.float64)
    cos, sin = backend.from_numpy(c.astype(np.float32)), backend.from_numpy(s.astype(np.float32))
    base = backend.from_numpy(rng.standard_normal((3, 6, 4, 16)).astype(np.float32))
    yield "transposed x", xp.permute_dims(base, (0, 2, 1, 3)), cos, sin
    wide = backend.from_numpy(rng.standard_normal((4, 12, 32)).astype(np.float32))
    yield "stepped x", wide[:, ::2, ::2], cos, sin
    yield "zero-stride x", xp.broadcast_to(base[:1, :, :1, :], (3, 6, 4, 16))[:, :, 0, :], cos, sin
    yield "zero-stride tables", base[:, :, 0, :], xp.broadcast_to(cos[:1, :], (6, 8)), \
        xp.broadcast_to(sin[:1, :], (6, 8))
    yield "stepped tables", base[:, :, 0, :], \
        backend.from_numpy(np.repeat(c, 2, axis=-1).astype(np.float32))[:, ::2], \
        backend.from_numpy(np.repeat(s, 2, axis=-1).astype(np.float32))[:, ::2]
    if backend.name == "numpy":
        flat = rng.standard_normal((3, 6, 16)).astype(np.float32)
        yield "negative-stride x", flat[::-1, ::-1, :], cos, sin
        yield "negative-stride features", flat[..., ::-1], cos, sin
        yield "Fortran-ordered x", np.asfortranarray(flat), cos, sin
        raw = np.zeros(flat.size * 4 + 1, dtype=np.uint8)
        unaligned = raw[1:].view(np.float32).reshape(flat.shape)
        unaligned[...] = flat
        yield "unaligned x", unaligned, cos, sin
        ro = flat.copy()
        ro.flags.writeable = False
        c_ro, s_ro = c.astype(np.float32), s.astype(np.float32)
        c_ro.flags.writeable = s_ro.flags.writeable = False
        yield "read-only inputs", ro, c_ro, s_ro
    if backend.name == "torch":
        import torch

        t = torch.from_numpy(rng.standard_normal((3, 6, 16)).astype(np.float32))
        yield "channels-last-like x", t.permute(2, 0, 1).contiguous().permute(1, 2, 0), cos, sin
        yield "x with storage offset", t.reshape(-1)[5:5 + 3 * 6 * 8].reshape(3, 6, 8), \
            cos[:, :4], sin[:, :4]
        yield "negated view (is_neg)", torch._neg_view(t), cos, sin


@_check
def check_kernel_strides(kernel: _Counting, backend: Any) -> str | None:
    """Transposed, stepped, expanded, zero-stride, negative, Fortran-ordered, unaligned and
    read-only inputs: answered correctly or declined, never written."""
    import numpy as np

    rng = np.random.default_rng(2)
    for what, x, cos, sin in _strided(backend, rng):
        why = _each_layout(kernel, backend, x, cos, sin, what)
        if why:
            return why
    return None


@_check
def check_kernel_threads(kernel: _Counting, backend: Any) -> str | None:
    """Eight threads calling at once, each with its own inputs: each gets its own answer."""
    import numpy as np

    errors: list[str] = []
    barrier = threading.Barrier(8, timeout=60)

    def work(i: int) -> None:
        rng = np.random.default_rng(100 + i)
        # the last thread's x is big enough (2^19 elements) for a kernel's own worker threads
        seq, dim = (64 + i, 32) if i < 7 else (512, 128)
        x = backend.from_numpy(rng.standard_normal((2, 4, seq, dim)).astype(np.float32))
        c, s = _tables(rng, (seq, dim // 2), np.float32)
        cos, sin = backend.from_numpy(c), backend.from_numpy(s)
        try:
            barrier.wait()
            for _ in range(4):
                why = _compare(kernel, backend, x, cos, sin, "half", f"thread {i}")
                if why:
                    errors.append(why)
                    return
        except Exception as exc:
            errors.append(f"thread {i}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors[0] if errors else None


# -- derivatives (torch) ----------------------------------------------------------------------
class _Declines(_Counting):
    def __init__(self) -> None:
        self.calls = self.answered = self.ulps = 0

    def rotate(self, x: Any, cos: Any, sin: Any, *, layout: str) -> Any:
        return None


def _via_kernel(kernel: _Counting, layout: str, xp: Any) -> Callable[[Any, Any, Any], Any]:
    """The rotation as the core makes it: the kernel's answer, else the generic rotation."""
    def rotate(x: Any, cos: Any, sin: Any) -> Any:
        out = kernel.rotate(x, cos, sin, layout=layout)
        return _generic(x, cos, sin, layout, xp) if out is None else out
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


@_check
def check_kernel_derivatives(kernel: _Counting, backend: Any) -> str | None:
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


def _derivatives(kernel: _Counting, xp: Any, torch: Any, fwad: Any) -> str | None:
    import numpy as np

    rng = np.random.default_rng(3)
    x0 = torch.from_numpy(rng.standard_normal((2, 5, 16)).astype(np.float32))
    c, s = (torch.from_numpy(a) for a in _tables(rng, (5, 8), np.float32))
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
    return _first(iter(results))


@_check
def check_kernel_compiled(kernel: _Counting, backend: Any) -> str | None:
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
                c, s = (torch.from_numpy(a) for a in _tables(rng, (seq, 16), np.float32))
                want = _generic(x, c, s, layout, backend.namespace())
                got = compiled(x, c, s)
                results.append(_close(got, want, f"torch.compile(dynamic={dynamic}) values, "
                                                  f"seq={seq}, {layout}", kernel.ulps))
                xg = x.clone().requires_grad_(True)
                compiled(xg, c, s).sum().backward()
                xr = x.clone().requires_grad_(True)
                _generic(xr, c, s, layout, backend.namespace()).sum().backward()
                results.append(_close(xg.grad, xr.grad, f"torch.compile(dynamic={dynamic}) "
                                                        f"gradient, {layout}", kernel.ulps))
        # make_fx records the ops torch's dispatcher sees: a kernel that computes outside it
        # must decline there, or its answer is frozen into the graph as a constant
        from torch.fx.experimental.proxy_tensor import make_fx

        x1, x2 = (torch.from_numpy(rng.standard_normal((2, 9, 32)).astype(np.float32))
                  for _ in range(2))
        c, s = (torch.from_numpy(a) for a in _tables(rng, (9, 16), np.float32))
        graph = make_fx(fast)(x1, c, s)
        results.append(_close(graph(x2, c, s), _generic(x2, c, s, layout, backend.namespace()),
                              f"make_fx's graph run on new values, {layout}", kernel.ulps))
    return _first(iter(results))
