"""What a call of an encoder's public method learns about its inputs before the subclass's hook
runs: the :class:`Ctx` (namespace, backend adapter, device, wide dtype) found by
:func:`make_context` through the registry's services, positions checked by
:func:`check_positions`, and the dtype asked for resolved by :func:`resolve_dtype`. The kind
classes of :mod:`.base` call these; plugin hooks receive the :class:`Ctx`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._jax_eager import is_jax_namespace
from .._services import current_services

if TYPE_CHECKING:
    from .._services import Services
    from ..backends._base import Backend

__all__ = ["Ctx", "check_positions", "make_context", "own_methods", "params_dtype", "resolve_dtype",
           "run_hook"]

_NO_DTYPE: Any = object()  # run_hook: the hook takes no dtype (``_encode``)


@dataclass(frozen=True, slots=True)
class Ctx:
    """What a private hook needs to know about the caller's arrays.

    :ivar xp: the Array API namespace of the inputs.
    :ivar backend: the adapter of that namespace.
    :ivar device: the inputs' device (None inside a tracer, for a sharded array, and for a
        JAX array not committed to a device on the default one: arrays made with it are then
        not committed either).
    :ivar wide: the float dtype to compute in (float64 where the backend offers it).
    """

    xp: Any
    backend: Backend
    device: Any
    wide: Any

    @property
    def has_float64(self) -> bool:
        return bool(self.wide == getattr(self.xp, "float64", None))

    def constant(self, values: Any, dtype: Any = None) -> Any:
        """A host constant (a Python number or list) as an array on the inputs' device."""
        return self.xp.asarray(values, dtype=self.wide if dtype is None else dtype,
                               device=self.device)


def run_hook(enc: Any, hook: str, ctx: Ctx, *arrays: Any, params: Any,
             dtype: Any = _NO_DTYPE) -> Any:
    """``getattr(enc, hook)(*arrays, params=params, ctx=ctx[, dtype=dtype])``: an encoder's
    computation after validation. The one dispatch to a framework: on eager JAX, a hook whose
    class declares ``_compile_hook_eagerly`` runs as one compiled program per shape, with the
    bits of running it op by op (:mod:`peregistry._jax_eager`)."""
    if is_jax_namespace(ctx.xp) and (
            dtype is _NO_DTYPE or dtype in (ctx.xp.float32, ctx.xp.float64)):
        from .._jax_eager import compiled_hook

        static = {} if dtype is _NO_DTYPE else {"dtype": dtype}
        out = compiled_hook(enc, hook, arrays, {"params": dict(params)}, **static)
        if out is not None:
            return out
    if dtype is _NO_DTYPE:
        return getattr(enc, hook)(*arrays, params=params, ctx=ctx)
    return getattr(enc, hook)(*arrays, params=params, ctx=ctx, dtype=dtype)


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


def make_context(owner: str, arrays: tuple[Any, ...], *, services: Services | None = None,
                 names: tuple[str, ...] | None = None) -> tuple[Ctx, list[Any]]:
    """The :class:`Ctx` of ``arrays`` (None entries skipped) and the arrays, Python numbers and
    sequences made arrays of the others' backend (NumPy if there are none). Backends are looked
    up in ``services`` (default: :func:`peregistry._services.current_services`). ``names``,
    if given, are the arguments' names (one per array), for the error messages."""
    registry = current_services() if services is None else services
    backend, device, lead = None, None, None
    for a in arrays:  # the usual call: arrays of one backend (and Nones), in one pass
        if a is None:
            continue
        b = registry.backend_of(a)
        if b is None or (backend is not None and b is not backend):
            break
        if backend is None:
            backend, device, lead = b, b.placement(a), a
    else:
        if backend is not None:
            return _context_of(backend, device, lead), list(arrays)
    labels: tuple[str | None, ...] = names if names is not None else (None,) * len(arrays)
    backend = None
    first: str | None = None
    owners = []
    for a, label in zip(arrays, labels, strict=True):
        b = None if a is None else registry.backend_of(a)
        owners.append(b)
        if a is None:
            continue
        if b is None:
            if isinstance(a, int | float | list | tuple) and not isinstance(a, bool):
                continue
            raise TypeError(
                f"{owner}: {label + ': ' if label else ''}expected an array of a registered backend "
                f"({', '.join(x.name for x in registry.backends())}) or a Python "
                f"number/sequence, got {type(a).__module__}.{type(a).__qualname__}"
            )
        if backend is None:
            backend, first = b, label
        elif b is not backend:
            raise _mixed_backends(owner, first, backend, label, b)
    if backend is None:
        import numpy  # noqa: F401 - Python inputs are NumPy's

        backend = registry.backend("numpy")
    xp = backend.namespace()
    device = None
    out = []
    for a, b, label in zip(arrays, owners, labels, strict=True):
        if a is not None and b is None:
            a = _from_python(owner, a, backend, what=label or "positions")
        elif a is not None and device is None:
            device = backend.placement(a)
        out.append(a)
    return Ctx(xp=xp, backend=backend, device=device, wide=backend.wide_float_dtype(device)), out


#: ``(backend, device, wide dtype)`` -> its :class:`Ctx` (immutable, so shared by every call:
#: building the frozen dataclass costs more than a lookup). Not read or filled while tracing
#: (a dict read by Dynamo would be guarded on); at most 64 entries.
_CONTEXTS: dict[tuple[Any, Any, Any], Ctx] = {}


def _context_of(backend: Backend, device: Any, array: Any) -> Ctx:
    """The :class:`Ctx` of ``array`` (of ``backend``, on ``device``)."""
    wide = backend.wide_float_dtype(device)
    if backend.is_tracing(array):
        return Ctx(xp=backend.namespace(), backend=backend, device=device, wide=wide)
    key = (backend, device, wide)
    try:
        return _CONTEXTS[key]
    except (KeyError, TypeError):  # new, or an unhashable device
        pass
    ctx = Ctx(xp=backend.namespace(), backend=backend, device=device, wide=wide)
    if len(_CONTEXTS) < 64:
        with contextlib.suppress(TypeError):
            _CONTEXTS[key] = ctx
    return ctx


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
    integral, real = _dtype_kind(ctx.xp, dtype)
    if integral:
        return positions
    if real:
        if continuous:
            return positions
        raise TypeError(
            f"{owner}: {what} must have an integer dtype (this encoder is defined at integer "
            f"positions only), got {ctx.backend.dtype_name(dtype)}"
        )
    raise TypeError(f"{owner}: {what} must have {allowed}, got dtype {dtype}")


#: ``(namespace name, dtype)`` -> ``(integral, real floating)``: asked on every call, answered
#: once per dtype (``isdtype`` costs microseconds in array-api-compat's NumPy namespace).
_DTYPE_KINDS: dict[tuple[str, Any], tuple[bool, bool]] = {}


def _dtype_kind(xp: Any, dtype: Any) -> tuple[bool, bool]:
    name = getattr(xp, "__name__", "")
    # Not for torch: its isdtype is cheap, and a dict filled while Dynamo traces would be
    # guarded on and cost a recompilation (see Registry.backend_of).
    cached = "torch" not in name
    if cached:
        try:
            return _DTYPE_KINDS[(name, dtype)]
        except (KeyError, TypeError):  # new, or an unhashable dtype
            pass
    try:
        kind = (bool(xp.isdtype(dtype, "integral")), bool(xp.isdtype(dtype, "real floating")))
    except Exception:  # NumPy str/object dtypes and other non-numeric arrays
        kind = (False, False)
    if cached and len(_DTYPE_KINDS) < 256:
        with contextlib.suppress(TypeError):  # an unhashable dtype
            _DTYPE_KINDS[(name, dtype)] = kind
    return kind


def params_dtype(params: Mapping[str, Any], ctx: Ctx) -> Any:
    """The dtype of learned ``params`` (their promoted dtype if they differ); the namespace's
    default real floating dtype if that is not a real floating dtype."""
    dtypes = {v.dtype for v in params.values()}
    dt = dtypes.pop() if len(dtypes) == 1 else ctx.xp.result_type(*dtypes)
    return dt if ctx.backend.is_float_dtype(dt) else ctx.backend.default_float_dtype(ctx.device)


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


_OWN_METHODS: dict[tuple[type, tuple[str, ...]], bool] = {}


def own_methods(cls: type, names: tuple[str, ...]) -> bool:
    """Whether ``cls`` takes each method of ``names`` from peregistry itself (no plugin or test
    overrides it): a call's validation may then be remembered. Answered once per class."""
    key = (cls, names)
    known = _OWN_METHODS.get(key)
    if known is None:
        known = _OWN_METHODS[key] = all(
            getattr(getattr(cls, name), "__module__", "").startswith("peregistry.")
            for name in names)
    return known
