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

import threading
from collections.abc import Callable, Iterator
from typing import Any

from ._kernel_common import Counting, array, compare, dtype_pairs, each_layout, tables
from ._kernel_torch import check_kernel_compiled, check_kernel_derivatives
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
        counter = Counting(kernel)
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
def check_kernel_values(kernel: Counting, backend: Any) -> str | None:
    """Shapes, broadcast tables, both layouts, every dtype pair: equal to the generic rotation."""
    import numpy as np

    rng = np.random.default_rng(0)
    for xs, ts in _SHAPES:
        for xdt, tdt in dtype_pairs(backend):
            x = array(backend, rng.standard_normal(xs), xdt)
            c, s = tables(rng, ts, np.float64)
            cos, sin = array(backend, c, tdt), array(backend, s, tdt)
            why = each_layout(kernel, backend, x, cos, sin, f"x {xs} {xdt}, tables {ts} {tdt}")
            if why:
                return why
    return None


@_check
def check_kernel_special_values(kernel: Counting, backend: Any) -> str | None:
    """NaN, infinities, signed zeros, denormals and the largest finite values in x and tables."""
    import numpy as np

    rng = np.random.default_rng(1)
    for xdt, tdt in dtype_pairs(backend):
        fin = np.finfo(np.float64 if xdt == "float64" else np.float32)
        tiny = float(fin.smallest_subnormal) if xdt in ("float32", "float64") else 1e-7
        big = {"float16": 6.0e4, "bfloat16": 3.0e38}.get(xdt, float(fin.max))
        special = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, tiny, -tiny, big, -big, 1.0])
        x = rng.choice(special, size=(4, 6, 16))
        c, s = tables(rng, (6, 8), np.float64)
        c[0, :3], s[0, :3] = [0.0, -0.0, np.nan], [-0.0, 0.0, 1.0]
        with np.errstate(all="ignore"):  # inf - inf is NaN on purpose here
            x_, cos, sin = (array(backend, x, xdt), array(backend, c, tdt),
                            array(backend, s, tdt))
            why = each_layout(kernel, backend, x_, cos, sin, f"special values, {xdt}")
            if why:
                return why
    return None


def _strided(backend: Any, rng: Any) -> Iterator[tuple[str, Any, Any, Any]]:
    """``(what, x, cos, sin)`` with x (and tables) of unusual memory layouts, as the framework
    makes them: transposed, stepped, expanded, negative strides, Fortran order, unaligned."""
    import numpy as np

    xp = backend.namespace()
    c, s = tables(rng, (6, 8), np.float64)
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
def check_kernel_strides(kernel: Counting, backend: Any) -> str | None:
    """Transposed, stepped, expanded, zero-stride, negative, Fortran-ordered, unaligned and
    read-only inputs: answered correctly or declined, never written."""
    import numpy as np

    rng = np.random.default_rng(2)
    for what, x, cos, sin in _strided(backend, rng):
        why = each_layout(kernel, backend, x, cos, sin, what)
        if why:
            return why
    return None


@_check
def check_kernel_threads(kernel: Counting, backend: Any) -> str | None:
    """Eight threads calling at once, each with its own inputs: each gets its own answer."""
    import numpy as np

    errors: list[str] = []
    barrier = threading.Barrier(8, timeout=60)

    def work(i: int) -> None:
        rng = np.random.default_rng(100 + i)
        # the last thread's x is big enough (2^19 elements) for a kernel's own worker threads
        seq, dim = (64 + i, 32) if i < 7 else (512, 128)
        x = backend.from_numpy(rng.standard_normal((2, 4, seq, dim)).astype(np.float32))
        c, s = tables(rng, (seq, dim // 2), np.float32)
        cos, sin = backend.from_numpy(c), backend.from_numpy(s)
        try:
            barrier.wait()
            for _ in range(4):
                why = compare(kernel, backend, x, cos, sin, "half", f"thread {i}")
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


# the torch-only checks (their own module), after the others in the report
_check(check_kernel_derivatives)
_check(check_kernel_compiled)

