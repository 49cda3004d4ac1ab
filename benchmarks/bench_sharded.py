"""Sharded vs unsharded throughput of jitted ``rotate`` on a mesh of 8 host devices.

    python benchmarks/bench_sharded.py

Re-executes itself with XLA_FLAGS=--xla_force_host_platform_device_count=8 (it must be set before
jax is imported) and prints the ratio sharded/unsharded of throughput for one global shape."""

from __future__ import annotations

import os
import subprocess
import sys
import time

FLAG = "--xla_force_host_platform_device_count=8"


def bench() -> None:
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    import peregistry as per

    enc = per.get_encoder("rotary", dim=128)
    shape = (8, 16, 2048, 128)
    x = jnp.asarray(np.random.default_rng(0).standard_normal(shape), dtype=jnp.float32)
    mesh = jax.make_mesh((2, 2, 2), ("b", "h", "s"))
    xs = jax.device_put(x, NamedSharding(mesh, P("b", "h", "s", None)))
    x1 = jax.device_put(x, jax.devices()[0])
    f = jax.jit(lambda a, p: enc.rotate(a, p))
    pos = jnp.arange(shape[2], dtype=jnp.int32)
    ps = jax.device_put(pos, NamedSharding(mesh, P("s")))

    def timeit(a: object, p: object) -> float:
        f(a, p).block_until_ready()
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            for _ in range(5):
                out = f(a, p)
            out.block_until_ready()
            best = min(best, (time.perf_counter() - t) / 5)
        return best

    t1, t8 = timeit(x1, jax.device_put(pos, jax.devices()[0])), timeit(xs, ps)
    print(f"rotate {shape} float32: unsharded {t1 * 1e3:.2f} ms, sharded over 8 host devices "
          f"{t8 * 1e3:.2f} ms; throughput ratio sharded/unsharded = {t1 / t8:.2f}x "
          f"({os.cpu_count()} CPU cores)")


if __name__ == "__main__":
    if FLAG in os.environ.get("XLA_FLAGS", ""):
        bench()
    else:
        env = {**os.environ, "XLA_FLAGS": FLAG, "JAX_PLATFORMS": "cpu"}
        sys.exit(subprocess.run([sys.executable, __file__], env=env, check=False).returncode)
