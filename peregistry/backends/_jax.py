"""JAX adapter. float64 exists only with ``jax_enable_x64``; tracers have no device."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._base import Backend


class JaxBackend(Backend):
    name = "jax"
    priority = 20
    runs_jitted = True  # JAX code runs under jax.jit; eager dispatch is op by op

    def block_until_ready(self, x: Any) -> Any:
        return x.block_until_ready()

    def owns(self, x: Any) -> bool:
        import jax

        return isinstance(x, jax.Array)

    def namespace(self) -> Any:
        import jax.numpy as jnp

        return jnp

    def native(self) -> Any:
        import jax.numpy as jnp

        return jnp

    def float_dtypes(self) -> Mapping[str, Any]:
        import jax
        import jax.numpy as jnp

        out = {"float16": jnp.float16, "bfloat16": jnp.bfloat16, "float32": jnp.float32}
        if jax.config.read("jax_enable_x64"):  # type: ignore[no-untyped-call]
            out["float64"] = jnp.float64
        return out

    def device(self, x: Any) -> Any:
        # Inside jit a tracer has no device, and a sharded array spans several: placement is
        # then XLA's business, and new arrays are created with device=None.
        try:
            devices = x.devices()
        except Exception:
            return None
        return next(iter(devices)) if len(devices) == 1 else None

    def default_device(self) -> Any:
        import jax

        return jax.devices()[0]

    def to_numpy(self, x: Any) -> Any:
        import numpy as np

        if x.dtype.name == "bfloat16":
            x = x.astype("float32")
        return np.asarray(x)

    def jit(self, fn: Callable[..., Any]) -> Callable[..., Any] | None:
        import jax

        return jax.jit(fn)

    def take(self, table: Any, idx: Any, *, axis: int) -> Any:
        """``jnp.take`` with N-d indices directly: flattening a sharded ``(batch, Q, K)`` index
        and reshaping back makes XLA's SPMD partitioner all-gather it."""
        import jax.numpy as jnp

        return jnp.take(table, idx, axis=axis)

    def materialize(self, *arrays: Any) -> tuple[Any, ...]:
        """Under ``jax.jit``, pass the arrays through a ``lax.cond`` on their data. XLA fuses a
        cos/sin table into the elementwise rotation that consumes it, recomputing the
        trigonometry for every head and batch element (XLA:CPU even fuses across
        ``optimization_barrier``); a conditional is a fusion boundary, so the table is computed
        once. Both branches return the values unchanged (``x + 0`` in the untaken one).

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

    def reads_cheaply(self, x: Any) -> bool:
        devices = getattr(x, "devices", None)
        return devices is None or all(d.platform == "cpu" for d in devices())

    def is_tracing(self, x: Any) -> bool:
        import jax

        return isinstance(x, jax.core.Tracer)

    def grad(self, fn: Callable[[Mapping[str, Any]], Any]) -> Callable[[Mapping[str, Any]],
                                                                       dict[str, Any]] | None:
        """``jax.grad``: params are a pytree (a plain dict) already."""
        import jax

        def g(params: Mapping[str, Any]) -> dict[str, Any]:
            return dict(jax.grad(fn)(dict(params)))

        return g


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
