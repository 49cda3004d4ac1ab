"""Regression tests of the rotary engine's hardening (issue 15, items 1, 5, 6, 7, 17): each test
failed before its fix.

* item 1: integer ``offset`` near its dtype's limit never wraps (positions in a wide integer
  dtype, or an error naming ``offset``);
* item 5: concurrent first use on every backend, in fresh processes;
* item 6: huge or non-finite float options are a ``ValueError`` naming the option;
* item 7: absurd ``dim`` is rejected before anything proportional to it is allocated;
* item 17: equal encoders share one position table per process, under a byte budget.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry.testing._core import selected_backends

# -- item 6: float options that overflow float64 --------------------------------------------------


@pytest.mark.parametrize(("name", "options", "option"), [
    ("rotary", {"dim": 8, "theta": 10**400}, "theta"),
    ("mrope", {"dim": 8, "sections": (2, 1, 1), "theta": 10**400}, "theta"),
    ("mrope", {"dim": 8, "sections": (2, 1, 1), "theta": -(10**400)}, "theta"),
    ("rotary", {"dim": 8, "theta": math.inf}, "theta"),
    ("rotary", {"dim": 8, "theta": math.nan}, "theta"),
    ("sinusoidal", {"dim": 8, "base": 10**400}, "base"),
    ("transformer-xl", {"dim": 8, "base": 10**400}, "base"),
    ("rotary", {"dim": 8, "scaling": {"type": "linear", "factor": 10**400}}, "factor"),
    ("rotary", {"dim": 8, "scaling": {"type": "longrope", "short_factor": [10**400] * 4,
                                      "long_factor": [1.0] * 4,
                                      "original_max_position_embeddings": 16}}, "short_factor"),
    ("rotary", {"dim": 8, "scaling": {"type": "yarn", "factor": 4.0,
                                      "original_max_position_embeddings": 10**400}}, "scaling"),
])
def test_float_options_beyond_float64_are_a_value_error_naming_the_option(
        name: str, options: dict[str, Any], option: str) -> None:
    with pytest.raises(ValueError, match=option):
        per.get_encoder(name, **options)


def test_option_float_conversion_reports_overflow() -> None:
    spec = per.Option(float, 1.0, allowed="a finite number")
    spec.name = "scale"
    with pytest.raises(ValueError, match=r"x: option 'scale' must be a finite number"):
        spec.convert("x", 10**400)
    floats = per.Option(tuple, (), item=float, allowed="finite numbers")
    floats.name = "weights"
    with pytest.raises(ValueError, match=r"option 'weights'"):
        floats.convert("x", (1.0, -(10**400)))
    assert spec.convert("x", 10**300) == 1e300  # large but finite: kept


# -- item 7: absurd sizes rejected before allocating --------------------------------------------


#: Builds one encoder under a 4 GiB address-space limit (a run of the unfixed code then fails
#: with MemoryError at once instead of exhausting the machine) and prints what it raised. (2 GiB
#: once failed the import of the encoder's family in a CI run: NumPy's and its BLAS's reserved
#: address space varies; the test's measure is tracemalloc's peak below.)
_BUILD_UNDER_A_MEMORY_CAP = """
import resource, sys, tracemalloc
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
import peregistry as per
name, options = sys.argv[1], eval(sys.argv[2])
tracemalloc.start()
try:
    per.get_encoder(name, **options)
except Exception as exc:
    print(type(exc).__name__, exc, tracemalloc.get_traced_memory()[1])
else:
    print("built")
"""


@pytest.mark.parametrize(("name", "options"), [
    ("rotary", {"dim": 2**40}),
    ("rotary", {"dim": 2**32}),
    ("rotary", {"dim": 2**16 + 2}),
    ("mrope", {"dim": 2**40, "sections": (2**39, 0, 0)}),
    ("transformer-xl", {"dim": 2**40}),
])
@pytest.mark.backend_free  # a fresh NumPy-only process
def test_absurd_dim_is_rejected_naming_dim_and_the_limit(name: str,
                                                         options: dict[str, Any]) -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _BUILD_UNDER_A_MEMORY_CAP, name, repr(options)],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    kind, _, rest = out.strip().partition(" ")
    assert kind == "ValueError", out
    message, _, peak = rest.rpartition(" ")
    assert f"{name}: option 'dim' must be a positive even integer <= 65536, got " in message
    assert int(peak) < 16 << 20, f"{peak} bytes allocated before rejecting dim"


def test_the_largest_dim_is_accepted_and_documented() -> None:
    enc = per.get_encoder("rotary", dim=2**16)
    assert enc.inv_freq().shape == (2**15,)
    assert "<= 65536" in type(enc).dim.allowed
    from peregistry._options import MAX_DIM

    assert MAX_DIM == 2**16


# -- item 1: integer offsets near their dtype's limit ---------------------------------------------


def _namespace(name: str) -> Any:
    if name == "torch":
        torch = pytest.importorskip("torch")
        return torch
    if name == "jax":
        pytest.importorskip("jax")
        import jax.numpy as jnp

        return jnp
    if name == "array_api_strict":
        return pytest.importorskip("array_api_strict")
    return np


def _int32_limit_is_wide(name: str) -> bool:
    """JAX without x64 computes positions in int32: there the limit is 2**31 - 1."""
    if name != "jax":
        return False
    import jax

    return not jax.config.jax_enable_x64


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax", "array_api_strict"])
def test_int32_offset_near_its_limit_does_not_wrap(backend: str) -> None:
    xp = _namespace(backend)
    enc = per.get_encoder("rotary", dim=8)
    x_np = np.random.default_rng(0).standard_normal((4, 8))
    x = xp.asarray(x_np)
    offset = xp.asarray(2**31 - 2, dtype=xp.int32)
    if _int32_limit_is_wide(backend):
        with pytest.raises(ValueError, match=r"offset=2147483646 with 4 positions reaches "
                                             r"position 2147483649, beyond what int32"):
            enc.rotate(x, offset=offset)
        return
    got = np.asarray(enc.rotate(x, offset=offset))
    want = np.asarray(enc.rotate(x, offset=2**31 - 2))  # a Python int: exact positions
    np.testing.assert_array_equal(got, want)
    fresh = enc.rotate(x_np, np.arange(2**31 - 2, 2**31 + 2, dtype=np.int64))
    np.testing.assert_allclose(got, fresh, rtol=0, atol=1e-5)


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax", "array_api_strict"])
def test_offsets_beyond_the_widest_integer_are_an_error_naming_offset(backend: str) -> None:
    xp = _namespace(backend)
    enc = per.get_encoder("rotary", dim=8)
    x = xp.asarray(np.ones((4, 8), dtype=np.float32))
    bits = 32 if _int32_limit_is_wide(backend) else 64
    top = 2 ** (bits - 1) - 1
    dtype = xp.int32 if bits == 32 else xp.int64
    for offset in (top - 1, xp.asarray(top - 1, dtype=dtype)):
        with pytest.raises(ValueError, match=rf"offset={top - 1} with 4 positions reaches "
                                             rf"position {top + 2}, beyond what int{bits} "
                                             rf"positions hold \(-{top + 1} \.\. {top}\)"):
            enc.rotate(x, offset=offset)
    enc.rotate(x, offset=top - 3)  # the last position is the limit itself: fine
    enc.rotate(x, offset=-top - 1)


def test_unsigned_offset_beyond_int64_is_an_error() -> None:
    enc = per.get_encoder("rotary", dim=8)
    with pytest.raises(ValueError, match=r"offset=18446744073709551615 .* int64"):
        enc.rotate(np.ones((2, 8)), offset=np.asarray(2**64 - 1, np.uint64))
    with pytest.raises(ValueError, match=r"offset=9223372036854775807"):
        enc.rotate(np.ones((2, 8)), offset=np.asarray([0, 2**63 - 1], np.int64)[:, None])


def test_mrope_int32_offset_near_its_limit_does_not_wrap() -> None:
    enc = per.get_encoder("mrope", dim=8, sections=(2, 1, 1))
    x = np.random.default_rng(1).standard_normal((3, 8))
    got = enc.rotate(x, offset=np.asarray(2**31 - 1, np.int32))
    np.testing.assert_array_equal(got, enc.rotate(x, offset=2**31 - 1))


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_positions_at_the_dtype_limits_are_exact(backend: str, dtype: str) -> None:
    """The table gather path and the computed path agree at the largest positions."""
    xp = _namespace(backend)
    enc = per.get_encoder("rotary", dim=8)
    top = 2**31 - 1 if dtype == "int32" else 2**62
    x_np = np.random.default_rng(2).standard_normal((3, 8))
    pos_np = np.asarray([top, top - 1, 5])
    got = np.asarray(enc.rotate(xp.asarray(x_np), xp.asarray(pos_np, dtype=getattr(xp, dtype))))
    want = enc.rotate(x_np, pos_np.astype(np.float64))
    np.testing.assert_array_equal(got, want)
    one = np.asarray(enc.rotate(xp.asarray(x_np[:1]), xp.asarray([top], dtype=getattr(xp, dtype))))
    np.testing.assert_array_equal(one, want[:1])


# -- item 5: concurrent first use on every backend, in fresh processes ----------------------------

#: In a fresh process: 16 threads released together by a barrier each make their first
#: ``get_encoder``, ``rotate`` (computed, position-table and offset paths), ``cos_sin`` and
#: ``tables`` call on one backend; every thread must succeed with the same bits.
_CONCURRENT_FIRST_USE = """
import sys, threading
import numpy as np
backend = sys.argv[1]
if backend == "torch":
    import torch as xp
elif backend == "jax":
    import jax.numpy as xp
elif backend == "array_api_strict":
    import array_api_strict as xp
else:
    xp = np
import peregistry as per

barrier = threading.Barrier(16)
results, errors = [None] * 16, []

def work(i):
    try:
        barrier.wait()
        enc = per.get_encoder("rotary", dim=16, theta=500000.0)
        mro = per.get_encoder("mrope", dim=16, sections=(4, 2, 2))
        x = xp.asarray(np.linspace(-1, 1, 2 * 8 * 16, dtype=np.float32).reshape(2, 8, 16))
        pos = xp.asarray(np.arange(8, dtype=np.int64))
        out = [enc.rotate(x), enc.rotate(x, offset=100), enc.rotate(x, pos),
               enc.cos_sin(pos)[0], enc.tables(pos).rotate(x), mro.rotate(x, offset=3)]
        results[i] = [np.asarray(o) for o in out]
    except BaseException as exc:
        errors.append(f"thread {i}: {type(exc).__name__}: {exc}")

threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert not errors, errors
for r in results[1:]:
    for a, b in zip(results[0], r):
        assert a.tobytes() == b.tobytes()
print("ok")
"""


@pytest.mark.parametrize("backend", [b.name for b in selected_backends()])
def test_concurrent_first_use_in_fresh_processes(backend: str) -> None:
    """In each selected backend's env (each tox env checks its own; five fresh processes each)."""
    import subprocess
    import sys

    for run in range(5):
        proc = subprocess.run([sys.executable, "-c", _CONCURRENT_FIRST_USE, backend],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0 and proc.stdout.strip() == "ok", (
            f"run {run}: {proc.stdout[-2000:]}{proc.stderr[-4000:]}")


# -- item 17: one position table per process for equal encoders ----------------------------------


@pytest.fixture
def fresh_tables() -> Any:
    from peregistry import rope

    rope.clear_caches()
    budget = rope.table_cache_bytes()[1]
    yield rope
    rope.set_table_cache_bytes(budget)
    rope.clear_caches()


def kept_tables(enc: Any) -> list[Any]:
    """The tables of positions of ``enc`` (and every equal encoder) in the store."""
    from peregistry.rope._tables import STORE

    return [v for k, (v, _) in list(STORE._entries.items())
            if k[0] == "rotary positions" and k[1] is type(enc) and k[2] == enc._key]


def test_equal_encoders_share_one_position_table(fresh_tables: Any) -> None:
    rope = fresh_tables
    layers = [per.get_encoder("rotary", dim=64, theta=500000.0) for _ in range(32)]
    x = np.random.default_rng(3).standard_normal((1, 4, 1, 64))
    outs = [enc.rotate(x, offset=700) for enc in layers]
    for out in outs[1:]:
        np.testing.assert_array_equal(out, outs[0])
    used, _ = rope.table_cache_bytes()
    one = 2 * 1024 * 32 * 8  # cos and sin of 1024 positions, 32 pairs, float64
    assert used == one, f"{used} bytes for 32 equal encoders, one table is {one}"
    assert kept_tables(layers[5])  # every layer sees the shared table
    other = per.get_encoder("rotary", dim=64, theta=10000.0)
    other.rotate(x, offset=700)
    assert rope.table_cache_bytes()[0] == 2 * one  # unequal encoders: their own table


def test_the_shared_tables_have_a_budget_and_can_be_cleared(fresh_tables: Any) -> None:
    rope = fresh_tables
    one = 2 * 1024 * 32 * 8
    rope.set_table_cache_bytes(2 * one)
    x = np.ones((2, 64))
    encs = [per.get_encoder("rotary", dim=64, theta=1000.0 + i) for i in range(5)]
    want = [enc.rotate(x, offset=10) for enc in encs]
    assert rope.table_cache_bytes() == (2 * one, 2 * one)  # least recently used evicted
    assert not kept_tables(encs[0]) and kept_tables(encs[4])
    got = [enc.rotate(x, offset=10) for enc in encs]  # rebuilt: the same bits
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(a, b)
    rope.clear_caches()
    assert rope.table_cache_bytes()[0] == 0 and not kept_tables(encs[4])
    with pytest.raises(ValueError, match="nbytes"):
        rope.set_table_cache_bytes(-1)


@pytest.mark.backend_free  # a fresh NumPy-only process
def test_the_budget_comes_from_the_environment() -> None:
    import subprocess
    import sys

    code = ("from peregistry import rope; import numpy as np, peregistry as per; "
            "per.get_encoder('rotary', dim=64).rotate(np.ones((2, 64)), offset=3); "
            "print(*rope.table_cache_bytes())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60,
                         env={**__import__("os").environ,
                              "PEREGISTRY_TABLE_CACHE_BYTES": "1000"}).stdout
    assert out.split() == ["0", "1000"]
