"""Bit-for-bit outputs of every built-in encoder, kept from before the rope-engine refactor.

``tests/golden/<backend>.npz`` holds the outputs that the code of commit bb3aa8d (before the
house was rebuilt) gave on each backend; this test recomputes them and compares the bits. A
refactor must leave them unchanged; a deliberate change of numbers regenerates the files with
``python tests/test_golden.py`` (in an environment with every framework) and says why in its commit.

Float64 results go through the platform's float64 ``sin``/``cos``/``pow``, which NumPy computes
with different SIMD code on different CPUs (SVML on AVX-512, libm elsewhere): they differ by a
few units in the last place from one machine to another. Each file records the platform it was
made on (:func:`platform_key`); on that platform every output is compared bit for bit, on another
float64 outputs are compared within ``FLOAT64_ULPS`` units of their largest magnitude, and every
narrower dtype still bit for bit.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

GOLDEN = Path(__file__).parent / "golden"
PLATFORM = "__platform__"
#: Seen: 15 units between an AVX-512 machine and the one the files were made on.
FLOAT64_ULPS = 64

Case = tuple[str, Callable[[Any, Any], Any]]


def _cases() -> Iterator[Case]:
    """(key, fn(xp_native, asarray) -> array or tuple of arrays) for every encoder and layout."""
    import peregistry as per

    rng = np.random.default_rng(1234)
    x16 = rng.standard_normal((2, 3, 5, 16))
    ids = rng.integers(0, 4096, size=(2, 1, 5))
    mids = rng.integers(0, 300, size=(3, 2, 5))
    big = np.arange(2**20, 2**20 + 5)
    real = np.linspace(0.0, 37.5, 5)

    def scalings(half: int) -> list[dict[str, Any] | None]:
        return [
            None,
            {"type": "linear", "factor": 4.0},
            {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 8},
            {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
            {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
             "original_max_position_embeddings": 64},
            {"type": "longrope", "short_factor": [1.0 + i / 8 for i in range(half)],
             "long_factor": [2.0 + i / 4 for i in range(half)], "original_max_position_embeddings": 4,
             "factor": 8.0},
        ]

    for layout in ("interleaved", "split"):
        enc = per.get_encoder("sinusoidal", dim=16, layout=layout)
        yield f"sinusoidal-{layout}-ids", lambda xp, a, e=enc: e.encode(a(ids))
        yield f"sinusoidal-{layout}-big", lambda xp, a, e=enc: e.encode(a(big))
        yield f"sinusoidal-{layout}-real", lambda xp, a, e=enc: e.encode(a(real))
        yield f"sinusoidal-{layout}-f16", lambda xp, a, e=enc: e.encode(a(ids), dtype="float16")
    for layout in ("half", "interleaved"):
        for rd in (None, 8):
            for si, scaling in enumerate(scalings((rd or 16) // 2)):
                enc = per.get_encoder("rotary", dim=16, rotary_dim=rd, layout=layout,
                                      scaling=scaling)
                tag = f"rotary-{layout}-rd{rd}-s{si}"
                for dt in ("float32", "bfloat16", "float16", "float64"):
                    yield (f"{tag}-{dt}-off",
                           lambda xp, a, e=enc, dt=dt: e.rotate(a(x16, dt), offset=7))
                    yield (f"{tag}-{dt}-ids",
                           lambda xp, a, e=enc, dt=dt: e.rotate(a(x16, dt), a(ids)))
                    # The same call again: served by the position table / caches.
                    yield (f"{tag}-{dt}-ids-again",
                           lambda xp, a, e=enc, dt=dt: (e.rotate(a(x16, dt), a(ids)),
                                                        e.rotate(a(x16, dt), a(ids)))[1])
                yield f"{tag}-cos_sin", lambda xp, a, e=enc: e.cos_sin(a(ids))
                yield f"{tag}-cos_sin-real", lambda xp, a, e=enc: e.cos_sin(a(real))
                yield (f"{tag}-big",
                       lambda xp, a, e=enc: e.rotate(a(x16[0, 0], "float32"), a(big)))
    for interleaved in (False, True):
        for layout in ("half", "interleaved"):
            enc = per.get_encoder("mrope", dim=16, sections=[3, 3, 2] if interleaved else [2, 3, 3], layout=layout,
                                  interleaved=interleaved)
            tag = f"mrope-{layout}-il{interleaved}"
            for dt in ("float32", "bfloat16"):
                yield (f"{tag}-{dt}",
                       lambda xp, a, e=enc, dt=dt: e.rotate(a(x16[:, 0], dt), a(mids)))
            yield f"{tag}-cos_sin", lambda xp, a, e=enc: e.cos_sin(a(mids))
            yield f"{tag}-offset", lambda xp, a, e=enc: e.rotate(a(x16[:, 0], "float32"), offset=3)
    learned = [
        ("learned", {"num_positions": 64, "dim": 8}, lambda e, p, a: e.encode(a(ids % 64), params=p)),
        ("learned-2d", {"height": 6, "width": 7, "dim": 4},
         lambda e, p, a: e.encode(a(np.stack((ids % 6, ids % 7), axis=-1)), params=p)),
        ("learned-2d", {"height": 6, "width": 7, "dim": 4},
         lambda e, p, a: e.grid(6, 7, params=p)),
        ("t5", {"num_heads": 3}, lambda e, p, a: e.bias(a(ids[0]), a(ids[1]), params=p)),
        ("t5", {"num_heads": 3, "bidirectional": False},
         lambda e, p, a: e.bias(a(ids[0]), a(ids[1]), params=p)),
        ("shaw", {"max_distance": 16, "dim": 4},
         lambda e, p, a: e.embed(a(ids[0]), a(ids[1]), params=p)),
    ]
    for i, (name, opts, call) in enumerate(learned):
        enc = per.get_encoder(name, **opts)
        yield (f"{name}-{i}",
               lambda xp, a, e=enc, c=call: c(e, e.init(xp, seed=3, dtype="float32"), a))
        yield (f"{name}-{i}-default-dtype",
               lambda xp, a, e=enc, c=call: c(e, e.init(xp, seed=5), a))
    for heads in (8, 6):
        enc = per.get_encoder("alibi", num_heads=heads)
        yield f"alibi-{heads}", lambda xp, a, e=enc: e.bias(a(ids[0]), a(ids[1]))
        yield f"alibi-{heads}-bf16", lambda xp, a, e=enc: e.bias(a(ids[0]), a(ids[1]),
                                                                 dtype="bfloat16")
    txl = per.get_encoder("transformer-xl", dim=8)
    yield "transformer-xl", lambda xp, a: txl.embed(a(ids[0]), a(ids[1]))
    yield "transformer-xl-f32", lambda xp, a: txl.embed(a(ids[0]), a(ids[1]), dtype="float32")


def _backend_setup(name: str) -> tuple[Any, Callable[..., Any], Callable[[Any], np.ndarray]]:
    """(native module, asarray(values, dtype=None), to_numpy) for one backend."""
    import importlib

    from peregistry.registry import default_registry

    importlib.import_module(name)
    backend = default_registry.backend(name)
    floats = backend.float_dtypes()

    def asarray(values: Any, dtype: str | None = None) -> Any:
        values = np.asarray(values)
        if dtype is None:
            return backend.from_numpy(values)
        if dtype not in floats:
            pytest.skip(f"{name} has no {dtype}")
        return backend.from_numpy(values, dtype=floats[dtype])

    def to_numpy(out: Any) -> np.ndarray:
        dt = backend.dtype_name(out.dtype)
        arr = backend.to_numpy(out)
        return np.asarray(arr), dt

    return backend.native(), asarray, to_numpy


def _flatten(out: Any) -> list[Any]:
    return list(out) if isinstance(out, tuple) else [out]


def platform_key(backend: str) -> str:
    """What float64 transcendentals depend on: the CPU's SIMD features NumPy uses, and the
    versions of NumPy and of the backend's framework."""
    import importlib
    import platform

    try:  # private, but the one place NumPy says which SIMD code it dispatches to
        from numpy._core._multiarray_umath import __cpu_features__ as features
    except ImportError:
        features = {}
    simd = ",".join(sorted(k for k, v in features.items() if v)) or "?"
    mod = importlib.import_module(backend)
    return (f"{platform.machine()}; numpy {np.__version__}; {backend} "
            f"{getattr(mod, '__version__', '?')}; {simd}")


def _golden_name(backend: str) -> str:
    if backend == "jax":
        import jax

        return "jax-x64" if jax.config.read("jax_enable_x64") else "jax"
    return backend


def compute(backend: str) -> dict[str, np.ndarray]:
    native, asarray, to_numpy = _backend_setup(backend)
    floats: dict[str, np.ndarray] = {}
    for key, fn in _cases():
        try:
            out = fn(native, asarray)
        except pytest.skip.Exception:
            continue
        except TypeError as e:  # a dtype this backend lacks (bfloat16 on NumPy)
            if "is not a real floating dtype" not in str(e):
                raise
            continue
        for j, o in enumerate(_flatten(out)):
            arr, dt = to_numpy(o)
            floats[f"{key}#{j}#{dt}"] = arr
    return floats


def _selected() -> list[str]:
    from peregistry.testing._core import selected_backends

    return [b.name for b in selected_backends()]


@pytest.mark.parametrize("backend", _selected())
def test_outputs_bit_for_bit_as_before_the_refactor(backend: str) -> None:
    name = _golden_name(backend)
    path = GOLDEN / f"{name}.npz"
    if not path.exists():
        pytest.fail(f"{path} is missing: generate it with python tests/test_golden.py")
    with np.load(path) as stored:
        expected = dict(stored)
    made_on = str(expected.pop(PLATFORM, "unrecorded"))
    same_platform = made_on == platform_key(backend)
    got = compute(backend)
    assert sorted(got) == sorted(expected), (
        f"cases differ: new {sorted(set(got) - set(expected))[:5]}, "
        f"gone {sorted(set(expected) - set(got))[:5]}")
    differ = []
    for key, want in expected.items():
        have = got[key]
        if have.shape != want.shape or have.dtype != want.dtype:
            differ.append(f"{key}: {have.dtype}{have.shape}, but should be {want.dtype}{want.shape}")
            continue
        # Bits, not values: -0.0 vs 0.0 and NaN payloads count too.
        width = {2: np.uint16, 4: np.uint32, 8: np.uint64}[want.dtype.itemsize]
        if np.array_equal(have.view(width), want.view(width)):
            continue
        diff = float(np.nanmax(np.abs(have.astype(np.float64) - want.astype(np.float64))))
        if not same_platform and want.dtype == np.float64:
            scale = float(np.nanmax(np.abs(want))) if want.size else 0.0
            if np.array_equal(np.isnan(have), np.isnan(want)) and \
                    diff <= FLOAT64_ULPS * np.finfo(np.float64).eps * max(scale, 1e-300):
                continue
        differ.append(f"{key}: max |difference| {diff:.3g}")
    assert not differ, (
        f"{len(differ)} of {len(expected)} outputs changed on {name} (files made on: {made_on}; "
        f"here: {platform_key(backend)}):\n" + "\n".join(differ[:20]))


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    backends = sys.argv[1:] or ["numpy", "torch", "jax", "array_api_strict"]
    for b in backends:
        if b == "jax-x64":
            os.environ["JAX_ENABLE_X64"] = "1"
            b = "jax"
        out = compute(b)
        name = _golden_name(b)
        np.savez_compressed(GOLDEN / f"{name}.npz", **out, **{PLATFORM: np.asarray(platform_key(b))})
        print(f"{name}: {len(out)} arrays")


if __name__ == "__main__":
    main()
