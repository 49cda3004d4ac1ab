"""Eager JAX calls run as one compiled program per shape instead of one XLA compilation per
operation. Eager JAX compiles every operation anew for each new input shape (tens of
milliseconds each); an encoder's hook runs tens of them, so a first call of a shape took up to a
second (M-RoPE). Here a hook, or a pure function of arrays, is traced once per shape, dtype and
encoder and compiled without LLVM's optimizations: a fused program then gives the bits of
running its operations one by one (optimized, fusion contracts multiply-adds and moves the last
ulp; tests/test_golden.py and tests/test_jax_eager_compiled.py hold the bits). Only for hooks
whose defining class declares ``_compile_hook_eagerly = True`` in its own body (a hook may check
values eagerly and skip the check under a trace). Imported only when JAX arrays arrive."""

from __future__ import annotations

import _thread
from collections.abc import Callable, Mapping
from typing import Any

from ._namespaces import is_jax

__all__ = ["clear", "compiled_call", "compiled_hook", "declares", "is_jax_namespace", "is_tracer"]

#: XLA options of the programs: no LLVM optimization, so no multiply-add contraction.
EAGER_OPTIONS = {"xla_backend_optimization_level": 0}

_lock = _thread.allocate_lock()  # threading.Lock, without importing threading at startup
#: The two ``jax.jit`` functions (``"hook"``, ``"call"``), each holding JAX's cache of the
#: programs it compiled; emptied by :func:`clear` (``peregistry.rope.clear_caches``).
_jitted: dict[str, Callable[..., Any]] = {}
#: ``(class, hook)`` whose hook could not be traced (it reads values): eager until
#: :func:`clear` (``peregistry.rope.clear_caches``) or :data:`UNTRACEABLE_LIMIT` entries, when it
#: is emptied and learnt again (one failed trace per hook).
untraceable: set[tuple[type, str]] = set()
UNTRACEABLE_LIMIT = 256


#: Whether ``xp`` is JAX's array namespace (without importing JAX).
is_jax_namespace = is_jax


def is_tracer(x: Any) -> bool:
    """Whether ``x`` is staged by a trace (``jax.jit``, ``grad``, ``vmap``, ...)."""
    import jax

    return isinstance(x, jax.core.Tracer)


def declares(klass: type, hook: str) -> bool:
    """Whether the class that defines ``hook`` declares ``_compile_hook_eagerly = True`` in its
    own body (an inherited declaration does not cover an override). Asked anew on every eager
    call (a short walk of the MRO): no verdict is kept by class."""
    for c in klass.__mro__:
        if hook in c.__dict__:
            return bool(c.__dict__.get("_compile_hook_eagerly", False))
    return False


class _Static:
    """A hook call's static part as an argument of :func:`jax.jit`: equal encoders (same class,
    options and scaling class, as their position tables are keyed) share one program."""

    __slots__ = ("enc", "hook", "key", "kwargs")

    def __init__(self, enc: Any, hook: str, kwargs: tuple[tuple[str, Any], ...]) -> None:
        scaled = getattr(enc, "_scaled", None)
        self.enc, self.hook, self.kwargs = enc, hook, kwargs
        self.key = (type(enc), enc, type(getattr(scaled, "scaling", None)), hook, kwargs)

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Static) and self.key == other.key


def _traced_hook(static: _Static, arrays: tuple[Any, ...], traced: dict[str, Any]) -> Any:
    enc = static.enc
    ctx, _ = enc._context(arrays[0])
    return getattr(enc, static.hook)(*arrays, ctx=ctx, **traced, **dict(static.kwargs))


def _committed(arrays: tuple[Any, ...]) -> tuple[Any, ...]:
    """The arrays as they are if all are committed to their device or none is; a mix with the
    uncommitted ones committed. JAX compiles a program per pattern of committed inputs, so this
    keeps it to two per shape, without a ``device_put`` on every call of the usual case,
    arrays of ``jnp.asarray`` (none committed)."""
    first = arrays[0].committed if arrays else False
    if all(a.committed == first for a in arrays):
        return arrays
    import jax

    return tuple(a if a.committed else jax.device_put(a, a.device) for a in arrays)


def _call(fn: Callable[..., Any], arrays: tuple[Any, ...],
          static: tuple[tuple[str, Any], ...]) -> Any:
    return fn(*arrays, **dict(static))


def clear() -> None:
    """Drop the compiled programs (``peregistry.rope.clear_caches``): each lives in the cache of
    its ``jax.jit`` function, which goes with it; and forget which hooks did not trace."""
    with _lock:
        _jitted.clear()
        untraceable.clear()


def _jit(name: str, fn: Callable[..., Any], static: tuple[int, ...]) -> Callable[..., Any]:
    jitted = _jitted.get(name)
    if jitted is None:
        import jax

        with _lock:
            jitted = _jitted.get(name)
            if jitted is None:
                jitted = _jitted[name] = jax.jit(fn, static_argnums=static,
                                                 compiler_options=EAGER_OPTIONS)
    return jitted


def compiled_hook(enc: Any, hook: str, arrays: tuple[Any, ...],
                  traced: Mapping[str, Any] | None = None, **static: Any) -> Any | None:
    """``getattr(enc, hook)(*arrays, ctx=..., **traced, **static)`` for concrete JAX ``arrays``
    (and array-valued keywords ``traced``, e.g. ``params``) as one compiled program, or None
    where that is not done: the hook's class does not declare it, an input is traced or empty,
    or the hook did not trace (it then runs eagerly from now on)."""
    klass = type(enc)
    if (klass, hook) in untraceable or not declares(klass, hook):
        return None
    import jax

    kw = dict(traced or {})
    if (any(is_tracer(a) for a in jax.tree_util.tree_leaves((arrays, kw)))
            or any(a.size == 0 for a in arrays)):
        return None
    try:
        arrays = _committed(arrays)
        return _jit("hook", _traced_hook, (0,))(_Static(enc, hook, tuple(sorted(static.items()))),
                                          tuple(arrays), kw)
    except jax.errors.JAXTypeError:  # Python control flow on values, int(tracer), np.asarray...
        with _lock:
            if len(untraceable) >= UNTRACEABLE_LIMIT:
                untraceable.clear()
            untraceable.add((klass, hook))
        return None
    except ValueError:  # inside an enclosing trace (concrete inputs closed over by jax.jit),
        return None  # where a program with compiler options may not nest: the caller stages it


def compiled_call(fn: Callable[..., Any], *arrays: Any, **static: Any) -> Any:
    """``fn(*arrays, **static)`` for concrete JAX ``arrays`` and hashable ``static`` keywords, as
    one program compiled per shape (the bits of eager execution); run as it is inside an
    enclosing trace (concrete arrays closed over by ``jax.jit``), which stages it."""
    try:
        return _jit("call", _call, (0, 2))(fn, _committed(arrays), tuple(sorted(static.items())))
    except ValueError:  # a program with compiler options may not nest in another trace
        return fn(*arrays, **static)
