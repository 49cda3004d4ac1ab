"""What the rotation-kernel checks share (:mod:`peregistry.testing.kernels`): the kernel
counted, its answer compared with the generic rotation (shape, dtype, namespace, device, inputs
unchanged, bits or the declared ulps), and the inputs made on each backend."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["Counting", "array", "compare", "dtype_pairs", "each_layout", "first", "generic",
           "tables", "to_numpy"]


class Counting:
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
def generic(x: Any, cos: Any, sin: Any, layout: str, xp: Any = None) -> Any:
    """The generic rotation (:func:`peregistry.rope.apply_rotation`) the kernel must equal."""
    from ..rope import apply_rotation

    return apply_rotation(x, cos, sin, layout=layout, xp=xp)  # type: ignore[arg-type]


def to_numpy(backend: Any, a: Any) -> Any:
    """A float64 NumPy copy (bfloat16 arrives through float32, exactly)."""
    import numpy as np

    if hasattr(a, "resolve_neg"):  # a torch negated or conjugated view
        a = a.resolve_neg().resolve_conj()
    return np.asarray(backend.to_numpy(a), dtype=np.float64)


def compare(kernel: Counting, backend: Any, x: Any, cos: Any, sin: Any, layout: str,
             what: str) -> str | None:
    """Call the kernel; None if it declined or equals the generic rotation, else what broke."""
    import numpy as np

    before = [to_numpy(backend, a).tobytes() for a in (x, cos, sin)]
    out = kernel.rotate(x, cos, sin, layout=layout)
    after = [to_numpy(backend, a).tobytes() for a in (x, cos, sin)]
    for name, b, a in zip(("x", "cos", "sin"), before, after, strict=True):
        if a != b:
            return f"{what}: the kernel wrote into its input {name}"
    if out is None:
        return None
    want = generic(x, cos, sin, layout)
    if out is x:
        return f"{what}: the kernel returned x itself, not a new array"
    if type(out) is not type(want) and not backend.owns(out):
        return f"{what}: out is a {type(out).__name__}, x a {type(x).__name__}"
    if tuple(out.shape) != tuple(want.shape) or out.dtype != want.dtype:
        return (f"{what}: out.shape={tuple(out.shape)} dtype={out.dtype}, but should be "
                f"{tuple(want.shape)} {want.dtype} (those of x)")
    if backend.device(out) != backend.device(x):
        return f"{what}: out on {backend.device(out)}, x on {backend.device(x)}"
    got, ref = to_numpy(backend, out), to_numpy(backend, want)
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


def each_layout(kernel: Counting, backend: Any, x: Any, cos: Any, sin: Any,
                 what: str) -> str | None:
    """:func:`_compare` in both layouts: the first that broke, or None."""
    for layout in ("half", "interleaved"):
        why = compare(kernel, backend, x, cos, sin, layout, f"{what}, layout={layout}")
        if why:
            return why
    return None


def first(results: Iterator[str | None]) -> str | None:
    for r in results:
        if r is not None:
            return r
    return None


# -- inputs -------------------------------------------------------------------------------------
def tables(rng: Any, shape: tuple[int, ...], np_dtype: Any) -> tuple[Any, Any]:
    import numpy as np

    angle = rng.uniform(-50.0, 50.0, size=shape)
    return np.cos(angle).astype(np_dtype), np.sin(angle).astype(np_dtype)


def dtype_pairs(backend: Any) -> list[tuple[str, str]]:
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


def array(backend: Any, a: Any, dtype: str) -> Any:
    """``a`` (NumPy float64) on the backend in ``dtype``, cast on the backend side (NumPy has
    no bfloat16)."""
    import numpy as np

    xp = backend.namespace()
    wide = backend.from_numpy(np.asarray(a, dtype=np.float32 if dtype != "float64" else np.float64))
    return wide if str(wide.dtype).endswith(dtype) else xp.astype(wide, getattr(xp, dtype))
