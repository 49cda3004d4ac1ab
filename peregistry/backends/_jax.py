"""JAX adapter. float64 exists only with ``jax_enable_x64``; tracers have no device."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ._base import Backend


class JaxBackend(Backend):
    name = "jax"
    priority = 20
    _memos = ("_first",)
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

    def placement(self, x: Any) -> Any:
        """None for an array not committed to a device that lives on the process's first local
        device while no default device is set (``jnp.asarray``'s, usually): the arrays made
        for it are then not committed either, and land where it is. A compiled call with
        inputs of both placements commits the others first (a ``device_put`` each). Its device
        otherwise."""
        device = self.device(x)
        if device is None or x.committed:
            return device
        import jax

        unset = getattr(jax.config, "jax_default_device", None) is None
        return None if unset and device == self._first_device() else device

    def _first_device(self) -> Any:
        first = self.__dict__.get("_first")
        if first is None:
            import jax

            first = self.__dict__["_first"] = jax.local_devices()[0]
        return first

    def default_device(self) -> Any:
        import jax

        return jax.devices()[0]

    def from_numpy(self, a: Any, *, dtype: Any = None, device: Any = None) -> Any:
        """As the base class; a cast to a real or integer dtype is done by NumPy on the host
        (ml_dtypes for bfloat16: the same rounding, as ``jax.numpy.asarray`` itself does), not
        by a convert program XLA compiles for every new shape."""
        import numpy as np

        xp = self.namespace()
        if dtype is not None and xp.isdtype(dtype, ("integral", "real floating")):
            return xp.asarray(np.asarray(a, dtype=np.dtype(dtype)), dtype=dtype, device=device)
        return super().from_numpy(a, dtype=dtype, device=device)

    def to_numpy(self, x: Any) -> Any:
        import numpy as np

        if x.dtype.name == "bfloat16":  # widened on the host (exact), not by a compiled convert
            return np.asarray(x).astype(np.float32)
        return np.asarray(x)

    def jit(self, fn: Callable[..., Any], *, dynamic: bool = False) -> Callable[..., Any] | None:
        import jax  # (sizes are static: a new shape is traced again, whatever ``dynamic``)

        return jax.jit(fn)

    def take(self, table: Any, idx: Any, *, axis: int) -> Any:
        """``jnp.take`` with N-d indices directly: flattening a sharded ``(batch, Q, K)`` index
        and reshaping back makes XLA's SPMD partitioner all-gather it."""
        import jax.numpy as jnp

        return jnp.take(table, idx, axis=axis)

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

