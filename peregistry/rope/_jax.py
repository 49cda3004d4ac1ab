"""JAX answers of the rope engine, reached only through :mod:`._delegation`: eager tables
compiled as one program, the fusion boundary for a cos/sin table under ``jax.jit``, and whether
reading an array on the host is cheap."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .encoder import RotaryEncoder

#: XLA options of the eager tables' programs. Without LLVM's optimizations a fused program
#: gives the bits of running its operations one by one (what eager JAX does, and what
#: tests/test_golden.py holds); optimized, fusion contracts multiply-adds and moves the last ulp.
_EAGER_OPTIONS = {"xla_backend_optimization_level": 0}

_lock = threading.Lock()
_compiled: Callable[..., Any] | None = None
_compiled_calls: Callable[..., Any] | None = None
#: Encoder classes whose hook could not be traced (Python control flow on values): eager there.
_untraceable: set[type] = set()


class _Static:
    """An encoder as a static argument of :func:`jax.jit`: equal encoders (same class, options
    and scaling class, as their position tables are keyed) share one compiled program."""

    __slots__ = ("enc", "key")

    def __init__(self, enc: RotaryEncoder) -> None:
        scaled = getattr(enc, "_scaled", None)
        self.enc = enc
        self.key = (type(enc), enc, type(getattr(scaled, "scaling", None)))

    def __hash__(self) -> int:
        return hash(self.key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Static) and self.key == other.key


def _traced_half_cos_sin(static: _Static, pos: Any, seq_len: int | None) -> tuple[Any, Any]:
    enc = static.enc
    ctx, (p,) = enc._context(pos)
    cos, sin = enc._half_cos_sin(p, ctx=ctx, seq_len=seq_len)
    return cos, sin


def _declared(klass: type) -> bool:
    """Whether the class that defines ``_half_cos_sin`` declares, in its own body, that the hook
    may run traced on eager calls: a hook may read values when not tracing (a range check) and
    act otherwise under a trace, so an inherited declaration does not cover an override."""
    owner = next((c for c in klass.__mro__ if "_half_cos_sin" in c.__dict__), None)
    return owner is not None and bool(owner.__dict__.get("_compile_hook_eagerly", False))


def compiled_half_cos_sin(enc: RotaryEncoder, pos: Any, seq_len: int | None) -> tuple[Any, Any] | None:
    """``enc._half_cos_sin`` of concrete ``pos`` as one ``jax.jit`` program (cached per encoder
    identity, shape and dtype; compiled without LLVM optimizations so its bits are those of the
    operations run one by one), or None where that is not done: the class defining the hook
    does not declare ``_compile_hook_eagerly = True`` in its body, the hook did not trace (it
    then runs eagerly from now on), or ``pos`` is empty."""
    global _compiled
    klass = type(enc)
    if klass in _untraceable or pos.size == 0 or not _declared(klass):
        return None
    import jax

    if _compiled is None:
        with _lock:
            if _compiled is None:
                _compiled = jax.jit(_traced_half_cos_sin, static_argnums=(0, 2),
                                    compiler_options=_EAGER_OPTIONS)
    try:
        out: tuple[Any, Any] = _compiled(_Static(enc), pos, seq_len)
    except jax.errors.JAXTypeError:  # Python control flow on values, int(tracer), np.asarray...
        _untraceable.add(type(enc))
        return None
    return out


def _call(fn: Callable[..., Any], arrays: tuple[Any, ...],
          static: tuple[tuple[str, Any], ...]) -> Any:
    return fn(*arrays, **dict(static))


def compiled_call(fn: Callable[..., Any], *arrays: Any, **static: Any) -> Any:
    """``fn(*arrays, **static)`` for concrete JAX ``arrays`` and hashable ``static`` keywords, as
    one program compiled per shape without LLVM optimizations (the bits of eager execution)."""
    global _compiled_calls
    if _compiled_calls is None:
        import jax

        with _lock:
            if _compiled_calls is None:
                _compiled_calls = jax.jit(_call, static_argnums=(0, 2),
                                          compiler_options=_EAGER_OPTIONS)
    return _compiled_calls(fn, arrays, tuple(sorted(static.items())))


def materialize(*arrays: Any) -> tuple[Any, ...]:
    """Under ``jax.jit``, pass the arrays through a ``lax.cond`` on their data. XLA fuses a
    cos/sin table into the elementwise rotation that consumes it, recomputing the trigonometry
    for every head and batch element (XLA:CPU even fuses across ``optimization_barrier``); a
    conditional is a fusion boundary, so the table is computed once. Both branches return the
    values unchanged (``x + 0`` in the untaken one).

    Not on arrays that may be sharded across devices (see :func:`_maybe_sharded`): the
    predicate reads one element, which on a sharded table lives on one device, so SPMD
    partitioning would broadcast it with an all-reduce (Auto mesh axes) or refuse the slice
    (Explicit axes). There the table is left to XLA: sharding is kept and no collective is
    added, at the price of the trigonometry being fused into the rotation."""
    import jax
    import jax.numpy as jnp

    if not any(isinstance(a, jax.core.Tracer) for a in arrays) or arrays[0].size == 0:
        return arrays
    if any(_maybe_sharded(a) for a in arrays):
        return arrays
    pred = jnp.isfinite(jnp.reshape(arrays[0], (-1,))[0])
    return tuple(jax.lax.cond(pred, lambda a: a, lambda a: tuple(v + 0 for v in a),
                              tuple(arrays)))


def is_tracer(x: Any) -> bool:
    """Whether ``x`` is staged by a trace (``jax.jit``, ``grad``, ``vmap``, ...)."""
    import jax

    return isinstance(x, jax.core.Tracer)


def reads_cheaply(x: Any) -> bool:
    """On the CPU, reading values costs no device synchronization."""
    devices = getattr(x, "devices", None)
    return devices is None or all(d.platform == "cpu" for d in devices())


def _maybe_sharded(a: Any) -> bool:
    """True if the traced ``a`` lives on a mesh with a device axis (of size > 1) that is not
    manual, i.e. XLA's SPMD partitioner may split it across devices. Inside ``shard_map`` (all
    axes manual) each device holds its own block and reading an element is local."""
    import jax

    try:
        mesh = jax.typeof(a).sharding.mesh
        sizes, types = mesh.axis_sizes, mesh.axis_types
    except Exception:
        return False
    return any(n > 1 and t != jax.sharding.AxisType.Manual
               for n, t in zip(sizes, types, strict=True))


def wide_int(xp: Any) -> Any:
    """The widest integer dtype JAX gives now: int64 under ``jax_enable_x64``, else int32 (an
    int64 request would silently give int32, with a warning)."""
    import jax

    x64: bool = getattr(jax.config, "jax_enable_x64", False)
    return xp.int64 if x64 else xp.int32
