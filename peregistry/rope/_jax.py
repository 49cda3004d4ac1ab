"""JAX answers of the rope engine, reached only through :mod:`._delegation`: the fusion boundary
for a cos/sin table under ``jax.jit``, and whether reading an array on the host is cheap (eager
programs compiled per shape are :mod:`peregistry._jax_eager`'s, shared with the other kinds)."""

from __future__ import annotations

from typing import Any


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


def reads_cheaply(x: Any) -> bool:
    """On the CPU, reading values costs no device synchronization."""
    devices = getattr(x, "devices", None)
    return devices is None or all(d.platform == "cpu" for d in devices())


def int_bounds(x: Any) -> tuple[int, int] | None:
    """``(min, max)`` of a concrete array: read on the host where that costs nothing (the CPU;
    eager ``min``/``max`` would compile two programs per new shape), else two reductions;
    None inside a trace."""
    import jax
    import numpy as np

    if isinstance(x, jax.core.Tracer):
        return None
    if reads_cheaply(x) and getattr(x, "is_fully_addressable", True):
        a = np.asarray(x)
        return int(a.min()), int(a.max())
    import jax.numpy as jnp

    lo, hi = jnp.min(x), jnp.max(x)
    if isinstance(lo, jax.core.Tracer):  # a concrete array staged by an enclosing trace
        return None
    return int(lo), int(hi)


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
