"""Backend adapters: detection, namespaces, dtypes, devices, seeded values, conversion."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry.registry import default_registry
from peregistry.testing._core import selected_backends

BACKENDS = [b.name for b in selected_backends()]


def test_numpy_arrays_import_no_other_framework() -> None:
    code = (
        "import sys, numpy as np, peregistry\n"
        "out = peregistry.get_encoder('sinusoidal', dim=8).encode(np.arange(3))\n"
        "assert type(out) is np.ndarray\n"
        "heavy = [m for m in ('torch', 'jax', 'array_api_strict') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_every_builtin_adapter_is_registered() -> None:
    names = {b.name for b in default_registry.backends()}
    assert names == {"numpy", "torch", "jax", "array_api_strict"}
    owner = {p.name: p for p in default_registry.plugins()}["backends"]
    assert owner.distribution == "peregistry"


def test_adapter_detects_its_arrays_and_namespace(backend: Any) -> None:
    x = backend.from_numpy(np.arange(3))
    assert default_registry.backend_of(x) is backend
    assert default_registry.backend_of_namespace(backend.native()) is backend
    assert default_registry.backend_of_namespace(backend.namespace()) is backend
    assert default_registry.backend_of_namespace(backend.name) is backend


def test_unknown_namespace_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="is not the namespace of a known backend"):
        default_registry.backend_of_namespace(sys)


def test_default_and_wide_dtypes(backend: Any) -> None:
    xp = backend.namespace()
    expected_default = {"numpy": "float64", "array_api_strict": "float64", "torch": "float32"}
    if backend.name in expected_default:
        assert backend.dtype_name(backend.default_float_dtype()) == expected_default[backend.name]
    wide = backend.wide_float_dtype()
    if backend.name == "jax":
        import jax

        assert wide == (xp.float64 if jax.config.jax_enable_x64 else xp.float32)
    else:
        assert wide == xp.float64


def test_strict_device_without_float64_computes_in_float32() -> None:
    if "array_api_strict" not in BACKENDS:
        pytest.skip("array_api_strict is not among the selected backends")
    import array_api_strict as s

    b = default_registry.backend("array_api_strict")
    assert b.wide_float_dtype(s.Device("no_float64")) == s.float32
    enc = per.get_encoder("sinusoidal", dim=8)
    pos = s.asarray([0, 1, 2**20], device=s.Device("no_float64"))
    out = enc.encode(pos, dtype=s.float32)
    assert out.device == s.Device("no_float64")
    ref = per.get_encoder("sinusoidal", dim=8).encode(np.asarray([0, 1, 2**20]), dtype=np.float64)
    assert np.max(np.abs(np.from_dlpack(out) - ref)) < 1e-5


def test_random_normal_is_identical_on_every_backend(backend: Any) -> None:
    f32 = backend.float_dtypes()["float32"]
    got = backend.to_numpy(backend.random_normal((4, 3), seed=7, std=0.5, dtype=f32,
                                                 device=None))
    want = (np.random.default_rng(7).standard_normal((4, 3)) * 0.5).astype(np.float32)
    np.testing.assert_array_equal(got, want)


def test_mixing_frameworks_is_an_error() -> None:
    others = [b for b in selected_backends() if b.name != "numpy"]
    if not others:
        pytest.skip("needs a second backend besides numpy")
    other = others[0]
    from peregistry.encoders.base import make_context

    with pytest.raises(TypeError, match=f"inputs mix arrays of {other.name} and numpy"):
        make_context("test", (other.from_numpy(np.arange(2)), np.arange(2)))


def _pairs() -> list[tuple[str, str]]:
    return [(a, b) for a in BACKENDS for b in BACKENDS if a != b]


NEEDS_TWO = pytest.param("numpy", "numpy", marks=pytest.mark.skip(reason="needs two selected backends"))


@pytest.mark.parametrize(("src", "dst"), _pairs() or [NEEDS_TWO])
def test_convert_between_backends_keeps_values_and_dtype(src: str, dst: str) -> None:
    import importlib

    s, d = default_registry.backend(src), default_registry.backend(dst)
    importlib.import_module(s.name)
    importlib.import_module(d.name)
    values = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    params = {"table": s.from_numpy(values)}
    out = per.convert(params, d.native())
    assert set(out) == {"table"}
    assert default_registry.backend_of(out["table"]) is d
    assert d.dtype_name(out["table"].dtype) == "float32"
    np.testing.assert_array_equal(d.to_numpy(out["table"]), values)


def test_convert_preserves_bfloat16_and_detaches_torch() -> None:
    if not {"torch", "jax"} <= set(BACKENDS):
        pytest.skip("needs torch and jax among the selected backends")
    import jax.numpy as jnp
    import torch

    t = torch.nn.Parameter(torch.randn(4, 2, generator=torch.Generator().manual_seed(0))
                           .to(torch.bfloat16))
    j = per.convert({"w": t}, jnp)["w"]
    assert j.dtype == jnp.bfloat16
    back = per.convert({"w": j}, torch)["w"]
    assert back.dtype == torch.bfloat16 and not back.requires_grad
    assert torch.equal(back, t.detach())
    n = per.convert(t, np)
    assert n.dtype == np.float32
    np.testing.assert_array_equal(n, t.detach().float().numpy())


def test_convert_rejects_non_arrays() -> None:
    with pytest.raises(TypeError, match="convert: expected arrays of a registered backend"):
        per.convert({"a": object()}, np)


def test_placement_is_the_device_unless_an_adapter_says_else() -> None:
    """``Backend.placement`` (the device a call makes its arrays on) is the adapter's own
    ``device``, also for a third-party adapter that overrides only ``device``, and an
    adapter's ``placement`` override wins."""
    from peregistry.backends import Backend

    class OnlyDevice(Backend):
        name = "test-only-device"

        def device(self, x: Any) -> Any:
            return f"dev-{x}"

    class OwnPlacement(OnlyDevice):
        def placement(self, x: Any) -> Any:
            return None

    class Inherits(OnlyDevice):
        pass

    assert OnlyDevice().placement(3) == "dev-3" == Inherits().placement(3)
    assert OwnPlacement().placement(3) is None and OwnPlacement().device(3) == "dev-3"
    assert Backend().placement(np.arange(2)) == Backend().device(np.arange(2))
