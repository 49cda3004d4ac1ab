"""Argument checks and output placement shared by :mod:`peregistry.parallel`.

Values are checked only when they are concrete: under ``jax.jit``/``torch.compile`` an array is
a tracer whose values are unknown, and reading one would fail (JAX) or break the graph (torch).
"""

from __future__ import annotations

import itertools
import numbers
import operator
from typing import Any

from ..registry import default_registry


def count(name: str, value: Any, minimum: int) -> int:
    """``value`` as a Python int ``>= minimum``; a ``TypeError``/``ValueError`` naming ``name``."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, got {value!r}")
    try:
        n = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, got {value!r}") from None
    if n < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {n}")
    return n


def is_array(x: Any) -> bool:
    """An array argument: Python and NumPy integer scalars (``np.int64(1)``, what iterating
    ``np.arange`` gives) are ints, not arrays, though NumPy's have a shape and a dtype."""
    return (hasattr(x, "shape") and hasattr(x, "dtype")
            and not isinstance(x, numbers.Integral))


def is_concrete(x: Any) -> bool:
    """True unless ``x`` is being traced (a JAX tracer, a tensor inside ``torch.compile``)."""
    backend = _services().backend_of(x)
    return backend is None or not backend.is_tracing(x)


def host_ints(x: Any) -> list[int]:
    """The values of a concrete 1-D integer array, read on the host (for checks and messages)."""
    import numpy as np

    try:
        a = np.asarray(x)
    except (TypeError, RuntimeError, ValueError):  # e.g. a CUDA tensor: copy it to the host
        from array_api_compat import to_device

        a = np.asarray(to_device(x, "cpu"))
    return [int(v) for v in a.reshape(-1)]


def namespace(owner: str, name: str, x: Any) -> Any:
    """The Array API namespace of array ``x`` (array-api-compat's, through the backend adapter:
    a lookup cached by type, which ``torch.compile`` traces without a graph break)."""
    backend = _services().backend_of(x)
    if backend is None:
        raise TypeError(f"{owner}: {name} must be an array of a registered backend, got "
                        f"{type(x).__module__}.{type(x).__qualname__}")
    return backend.namespace()


def device_of(x: Any) -> Any:
    """The device of array ``x`` (as its backend adapter reports it)."""
    backend = _services().backend_of(x)
    return x.device if backend is None else backend.device(x)


def one_framework(owner: str, **arrays: Any) -> None:
    """Refuse array arguments of different frameworks with a ``TypeError`` naming them (as
    ``enc.rotate`` does), instead of a framework's error deep inside the computation."""
    first: tuple[str, Any] | None = None
    for name, a in arrays.items():
        backend = _services().backend_of(a) if a is not None and is_array(a) else None
        if backend is None:
            continue
        if first is None:
            first = (name, backend)
        elif backend.name != first[1].name:
            raise TypeError(f"{owner}: inputs mix arrays of {first[1].name} and {backend.name}: "
                            f"{first[0]} is a {first[1].name} array but {name} is a "
                            f"{backend.name} array; pass all arrays from one framework "
                            f"(peregistry.convert moves arrays between frameworks)")


def in_range(owner: str, name: str, x: Any, low: int, high: int | None) -> None:
    """Check that the values of ``x`` (an int, or a concrete integer array) lie in
    ``[low, high)`` (``high=None``: no upper bound); traced arrays are not read."""
    if is_array(x):
        if not is_concrete(x):
            return
        values = host_ints(x)
    else:
        values = [x]
    bad = [v for v in values if v < low or (high is not None and v >= high)]
    if bad:
        allowed = f">= {low}" if high is None else f"in [{low}, {high})"
        if is_array(x):
            raise ValueError(f"{owner}: every entry of {name} must be {allowed}, got "
                             f"{_short(bad)} among its values")
        raise ValueError(f"{owner}: {name} must be {allowed}, got {bad[0]}")


def integer_array(owner: str, name: str, x: Any, *, ndim: int = 1) -> Any:
    """The namespace of ``x``, after checking that ``x`` is an integer array of ``ndim`` dims."""
    if not is_array(x):
        raise TypeError(f"{owner}: {name} must be an integer array, got {type(x).__name__}")
    xp = namespace(owner, name, x)
    if not xp.isdtype(x.dtype, "integral"):
        raise TypeError(f"{owner}: {name} must have an integer dtype, got {x.dtype}")
    if len(x.shape) != ndim:
        raise ValueError(f"{owner}: {name} must have {ndim} dimension(s), got shape "
                         f"{tuple(x.shape)}")
    return xp


def rank(owner: str, cp_rank: Any, cp_size: int) -> Any:
    """``cp_rank`` checked against ``cp_size``: a Python int, or a 0-d integer array (traced
    ones, e.g. ``jax.lax.axis_index``, are passed through unchecked)."""
    if is_array(cp_rank):  # a NumPy integer scalar is an int (is_array)
        integer_array(owner, "cp_rank", cp_rank, ndim=0)
        if is_concrete(cp_rank):
            value = host_ints(cp_rank)[0]
            if not 0 <= value < cp_size:
                raise ValueError(f"{owner}: cp_rank must be in [0, cp_size={cp_size}), "
                                 f"got {value}")
        return cp_rank
    value = count("cp_rank", cp_rank, 0)  # a plain int from here on (np.int64 too)
    if value >= cp_size:
        raise ValueError(f"{owner}: cp_rank must be in [0, cp_size={cp_size}), got {value}")
    return value


def cu_seqlens(owner: str, cu: Any, total: Any) -> tuple[Any, int]:
    """Check ``cu_seqlens`` (and ``total``, its last entry) and return ``(xp, total)``.

    ``cu_seqlens`` is a 1-D integer array ``[0, l0, l0 + l1, ...]`` (flash-attention's
    ``cu_seqlens_q``, TransformerEngine's ``cu_seqlens``). Concrete values must start at 0, never
    decrease and end at ``total``. A traced array needs ``total`` (a static int).
    """
    xp = integer_array(owner, "cu_seqlens", cu)
    if cu.shape[0] is not None and cu.shape[0] < 1:
        raise ValueError(f"{owner}: cu_seqlens must hold at least one entry (0), got shape "
                         f"{tuple(cu.shape)}")
    if total is not None:
        total = count("total", total, 0)
    if not is_concrete(cu):
        if total is None:
            raise ValueError(f"{owner}: cu_seqlens is traced, so its last entry is unknown: pass "
                             f"total= (the static number of tokens, e.g. x.shape[0])")
        return xp, total
    values = host_ints(cu)
    if values[0] != 0:
        raise ValueError(f"{owner}: cu_seqlens must start at 0, got cu_seqlens[0]={values[0]} "
                         f"(cu_seqlens={_short(values)})")
    for i in range(1, len(values)):
        if values[i] < values[i - 1]:
            raise ValueError(f"{owner}: cu_seqlens must not decrease, but cu_seqlens[{i - 1}]="
                             f"{values[i - 1]} > cu_seqlens[{i}]={values[i]} "
                             f"(cu_seqlens={_short(values)})")
    if total is not None and values[-1] != total:
        raise ValueError(f"{owner}: cu_seqlens ends at {values[-1]} tokens but total={total} "
                         f"(cu_seqlens={_short(values)})")
    return xp, values[-1]


def _short(values: list[int]) -> str:
    if len(values) <= 12:
        return str(values)
    return f"[{', '.join(map(str, values[:6]))}, ..., {', '.join(map(str, values[-3:]))}]"


def sequence_lengths(cu: Any) -> list[int] | None:
    """The lengths ``cu[i+1] - cu[i]`` of a concrete ``cu_seqlens`` (None when traced)."""
    if not is_concrete(cu):
        return None
    values = host_ints(cu)
    return [b - a for a, b in itertools.pairwise(values)]


def target(owner: str, xp: Any, like: Any, device: Any, *arrays: Any) -> tuple[Any, Any]:
    """The output namespace and device: those of the first array in ``arrays``, else
    ``like``'s, else ``xp``'s (a namespace, framework module or backend name), else NumPy's."""
    for a in (*arrays, like):
        if a is not None and is_array(a):
            return namespace(owner, "like", a), (device_of(a) if device is None else device)
    registry = _services()
    backend = registry.backend("numpy") if xp is None else registry.backend_of_namespace(xp)
    return backend.namespace(), device


def index_dtype(xp: Any, device: Any) -> Any:
    """The namespace's default integer dtype (int64; int32 for JAX without x64)."""
    return xp.__array_namespace_info__().default_dtypes(device=device)["integral"]



def _services() -> Any:
    """The default registry's backend adapters. Not ``current_services()``: its ContextVar
    lookup is a graph break under ``torch.compile`` (these helpers are called inside models)."""
    return default_registry
