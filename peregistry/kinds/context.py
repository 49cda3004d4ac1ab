"""What a call of an encoder's public method learns about its inputs, beyond the usual case the
kind classes of :mod:`.base` handle inline: the :class:`Ctx` of inputs that mix Python numbers
and sequences with arrays (:func:`make_context`, whose errors name the argument at fault),
positions checked by :func:`check_positions`, and the dtype asked for (:func:`resolve_dtype`).
Plugin hooks receive the :class:`Ctx`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from ..backends._base import Ctx
from ._services import current_services

if TYPE_CHECKING:
    from ..backends._base import Backend
    from ._services import Services

__all__ = ["Ctx", "check_positions", "compute_float", "devices_differ", "hook_arguments",
           "make_context", "pair_batch_shape", "params_dtype", "resolve_dtype"]

#: The public arguments the arrays of each kind's hook come from (for error messages).
_HOOK_ARGUMENTS = {"_encode": ("positions",), "_bias": ("q_positions", "k_positions"),
                   "_embed": ("q_positions", "k_positions")}


def _mixed_backends(owner: str, first: str | None, first_backend: Backend, name: str | None,
                    backend: Backend) -> TypeError:
    """The error for inputs of two frameworks, naming the inputs when their names are known
    (a params array of another framework than the positions is the common case)."""
    which = ""
    fix = "pass all arrays from one framework (peregistry.convert moves arrays between frameworks)"
    if first is not None and name is not None:
        if name.startswith("params") and not first.startswith("params"):
            which = (f": {name} is a {backend.name} array but the positions are "
                     f"{first_backend.name}")
            fix = ("pass positions and params of one framework (peregistry.convert(params, xp) "
                   "moves params)")
        else:
            which = (f": {first} is a {first_backend.name} array but {name} is a "
                     f"{backend.name} array")
    return TypeError(f"{owner}: inputs mix arrays of {first_backend.name} and {backend.name}"
                     f"{which}; {fix}")


def devices_differ(owner: str, backend: Backend,
                   named: Iterable[tuple[str, Any]]) -> ValueError | None:
    """The error for arrays of ``backend`` on two devices, naming the first two that differ and
    their devices (as :func:`_mixed_backends` names two frameworks); None if they share one.
    Asked once a computation has failed (the framework's own message names no argument), never
    on the way of a call that works."""
    first: tuple[str, Any] | None = None
    for name, a in named:
        if a is None or isinstance(a, int | float) or not backend.owns(a):
            continue
        try:
            device = backend.device(a)
        except Exception:  # (an array without one device: sharded, traced)
            continue
        if first is None:
            first = (name, device)
        elif device != first[1]:
            return ValueError(f"{owner}: inputs are on two devices: {first[0]} on {first[1]}, "
                              f"{name} on {device}; put every array of a call on one device")
    return None


def hook_arguments(hook: str, arrays: tuple[Any, ...],
                   params: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """``(argument name, array)`` of a hook's arrays and params, for :func:`devices_differ`."""
    names = _HOOK_ARGUMENTS.get(hook, ())
    return [*((names[i] if i < len(names) else f"argument {i}", a) for i, a in enumerate(arrays)),
            *((f"params[{k!r}]", v) for k, v in params.items())]


def make_context(owner: str, arrays: tuple[Any, ...], *, services: Services | None = None,
                 names: tuple[str, ...] | None = None) -> tuple[Ctx, list[Any]]:
    """The :class:`Ctx` of ``arrays`` (None entries skipped) and the arrays, Python numbers and
    sequences made arrays of the others' backend (NumPy if there are none). Backends are looked
    up in ``services`` (default: :func:`peregistry._services.current_services`). ``names``, if
    given, are the arguments' names (one per array), for the error messages."""
    if services is None:
        services = current_services()
    labels: tuple[str | None, ...] = names if names is not None else (None,) * len(arrays)
    backend = None
    first: str | None = None
    owners = []
    for a, label in zip(arrays, labels, strict=True):
        b = None if a is None else services.backend_of(a)
        owners.append(b)
        if a is None:
            continue
        if b is None:
            if isinstance(a, int | float | list | tuple) and not isinstance(a, bool):
                continue
            raise TypeError(
                f"{owner}: {label + ': ' if label else ''}expected an array of a registered backend "
                f"({', '.join(x.name for x in services.backends())}) or a Python "
                f"number/sequence, got {type(a).__module__}.{type(a).__qualname__}"
            )
        if backend is None:
            backend, first = b, label
        elif b is not backend:
            raise _mixed_backends(owner, first, backend, label, b)
    if backend is None:
        import numpy  # noqa: F401 - Python inputs are NumPy's

        backend = services.backend("numpy")
    out = [_from_python(owner, a, backend, what=label or "positions")
           if a is not None and b is None else a
           for a, b, label in zip(arrays, owners, labels, strict=True)]
    # the device of the first array given as one (else of the first made from Python values)
    lead = [a for a, b in zip(out, owners, strict=True) if b is not None] or \
        [a for a in out if a is not None]
    return backend.context(lead[0] if lead else None), out  # (None: NumPy's, any device)


def _from_python(owner: str, a: Any, backend: Backend, *, what: str) -> Any:
    """A Python number or (nested) sequence of numbers as an array of ``backend``."""
    import numpy as np

    try:
        arr = np.asarray(a)
    except ValueError:  # ragged nesting: NumPy's message does not say which argument
        raise ValueError(f"{owner}: {what} must be a rectangular (non-ragged) sequence of "
                         f"numbers, got {_short(a)}: its rows have different lengths") from None
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{owner}: {what} must be numbers, got {_short(a)}")
    return backend.from_numpy(arr)


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (positions may be long)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def check_positions(owner: str, positions: Any, ctx: Ctx, *, what: str, continuous: bool) -> Any:
    """``positions`` if they are an array of integers (or of reals, for a ``continuous``
    encoder); else a ``TypeError`` naming ``what`` (the argument), the value and what is
    allowed."""
    allowed = "an integer or real floating dtype" if continuous else "an integer dtype"
    if positions is None:
        raise TypeError(f"{owner}: {what} must be an array (or a Python sequence) of numbers "
                        f"with {allowed}, got None")
    dtype = positions.dtype
    try:
        integral = bool(ctx.xp.isdtype(dtype, "integral"))
        real = not integral and bool(ctx.xp.isdtype(dtype, "real floating"))
    except Exception:  # NumPy str/object dtypes and other non-numeric arrays
        integral = real = False
    if integral or (real and continuous):
        return positions
    if real:
        raise TypeError(
            f"{owner}: {what} must have an integer dtype (this encoder is defined at integer "
            f"positions only), got {ctx.backend.dtype_name(dtype)}"
        )
    raise TypeError(f"{owner}: {what} must have {allowed}, got dtype {dtype}")


def params_dtype(params: Mapping[str, Any], ctx: Ctx) -> Any:
    """The dtype of learned ``params`` (their promoted dtype if they differ); the namespace's
    default real floating dtype if that is not a real floating dtype."""
    dtypes = {v.dtype for v in params.values()}
    dt = dtypes.pop() if len(dtypes) == 1 else ctx.xp.result_type(*dtypes)
    return dt if ctx.backend.is_float_dtype(dt) else ctx.backend.default_float_dtype(ctx.device)


def compute_float(dtype: Any, xp: Any) -> Any:
    """The dtype a computation for real floating ``dtype`` runs in: ``dtype`` itself if it is
    float32 or float64, else the namespace's float64 or float32 of its size (a NumPy ``>f8`` on
    a little-endian machine is float64: dtypes are compared by size, as equality fails across
    byte orders), else float32 (bfloat16, float16: arithmetic never runs in half precision)."""
    if dtype in (xp.float32, xp.float64):
        return dtype
    return xp.float64 if xp.finfo(dtype).bits == 64 else xp.float32


def resolve_dtype(owner: str, backend: Backend, dtype: Any, device: Any) -> Any:
    """``dtype=None`` → the namespace's default real floating dtype; names like ``"bfloat16"``
    are accepted; anything not a real floating dtype of ``backend`` is a ``TypeError``."""
    if dtype is None:
        return backend.default_float_dtype(device)
    floats = backend.float_dtypes()
    if isinstance(dtype, str):
        if dtype in floats:
            return floats[dtype]
    elif backend.is_float_dtype(dtype):
        return dtype
    raise TypeError(
        f"{owner}: dtype={dtype!r} is not a real floating dtype of {backend.name}; "
        f"allowed: None, {', '.join(floats)}"
    )


def pair_batch_shape(owner: str, q: Any, k: Any) -> tuple[int, ...]:
    """Broadcast shape of ``q.shape[:-1]`` and ``k.shape[:-1]``; a clear error if they do not
    broadcast or a position array has no sequence axis."""
    for what, a in (("q_positions", q), ("k_positions", k)):
        if len(a.shape) == 0:
            raise ValueError(f"{owner}: {what} is a scalar, but should be (..., Q) / (..., K) "
                             f"with a sequence axis; use e.g. xp.asarray([p])")
    a, b = tuple(q.shape[:-1]), tuple(k.shape[:-1])
    n = max(len(a), len(b))
    a, b = (1,) * (n - len(a)) + a, (1,) * (n - len(b)) + b
    out = []
    for x, y in zip(a, b, strict=True):
        if x != y and 1 not in (x, y):
            raise ValueError(
                f"{owner}: leading axes of q_positions {tuple(q.shape)} and k_positions "
                f"{tuple(k.shape)} do not broadcast ({q.shape[:-1]} vs {k.shape[:-1]}); "
                f"positions are (..., Q) and (..., K) with broadcastable '...'"
            )
        out.append(y if x == 1 else x)
    return tuple(out)
