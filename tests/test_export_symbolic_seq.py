"""Exporting ``enc.rotate(x)`` / ``enc.rotate(x, offset=3)`` with a symbolic sequence length
(``jax.export`` with ``symbolic_shape``, ``torch.export`` with ``Dim("seq")`` and no ``max``).

With ``positions=None`` the positions are ``offset + arange(seq)``; the check that they fit
int64 (int32 under JAX without x64) compared ``offset + seq`` with the limit, which is
inconclusive for a JAX symbolic dimension and a guard that violates ``Dim("seq")``'s range in
torch. A symbolic length is not checked (like a traced offset, docs/rotary.md "Limits and bad
values"); the offset itself still is.

Measured (torch 2.13, jax 0.10, CPU): the exported torch program equals eager bit for bit. The
exported JAX function equals ``jax.jit`` at the concrete shape bit for bit; against eager it is
within one ulp of the rotated pair's length at XLA's default optimization level (the contract
of docs/rotary.md "Accuracy and dtypes": XLA contracts ``a·c - b·s`` into a fused multiply-add)
and equal bit for bit at ``--xla_backend_optimization_level=0`` (the jax env)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS
from test_compiled_rotation import _ulps

import peregistry as per

SHAPE = "2, 4, s, 64"
LENGTHS = (5, 37)  # neither is the torch example's 16
OFFSETS = (0, 3)


def _encoder() -> Any:
    return per.get_encoder("rotary", dim=64)


def _inputs(seq: int) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seq).standard_normal((2, 4, seq, 64)).astype(np.float32)


def _xla_unoptimized() -> bool:
    return "--xla_backend_optimization_level=0" in os.environ.get("XLA_FLAGS", "")


def _jax_export(fn: Any) -> Any:
    jax = pytest.importorskip("jax")
    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape(SHAPE), jax.numpy.float32)
    return jax.export.export(jax.jit(fn))(spec)


@pytest.mark.skipif("jax" not in BACKENDS, reason="jax backend not selected (PEREGISTRY_BACKENDS)")
@pytest.mark.parametrize("offset", OFFSETS)
def test_jax_export_with_a_symbolic_sequence_length(offset: int) -> None:
    jax = pytest.importorskip("jax")
    enc = _encoder()

    def fn(v: Any) -> Any:
        return enc.rotate(v, offset=offset) if offset else enc.rotate(v)

    exported = _jax_export(fn)
    for seq in LENGTHS:
        x = jax.numpy.asarray(_inputs(seq))
        got, eager = np.asarray(exported.call(x)), np.asarray(enc.rotate(x, offset=offset))
        np.testing.assert_array_equal(got, np.asarray(jax.jit(fn)(x)))
        assert _ulps(got, eager, x, interleaved=False) <= 1.0
        if _xla_unoptimized():
            np.testing.assert_array_equal(got, eager)


@pytest.mark.skipif("jax" not in BACKENDS, reason="jax backend not selected (PEREGISTRY_BACKENDS)")
def test_jax_export_still_rejects_an_offset_beyond_the_position_dtype() -> None:
    jnp = pytest.importorskip("jax.numpy")
    enc = _encoder()
    limit = int(np.iinfo(jnp.asarray(0).dtype).max)  # int32 without x64, else int64
    _jax_export(lambda v: enc.rotate(v, offset=limit))  # one position fits
    with pytest.raises(ValueError, match=f"offset={limit + 1} with s positions"):
        _jax_export(lambda v: enc.rotate(v, offset=limit + 1))


def _torch_export(offset: int) -> Any:
    torch = pytest.importorskip("torch")
    enc = _encoder()

    class Rotate(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return enc.rotate(x, offset=offset) if offset else enc.rotate(x)

    example = torch.from_numpy(_inputs(16))
    return torch.export.export(Rotate(), (example,),
                               dynamic_shapes={"x": {2: torch.export.Dim("seq")}})


@pytest.mark.skipif("torch" not in BACKENDS,
                    reason="torch backend not selected (PEREGISTRY_BACKENDS)")
@pytest.mark.parametrize("offset", OFFSETS)
def test_torch_export_with_an_unbounded_sequence_dim(offset: int) -> None:
    torch = pytest.importorskip("torch")
    module = _torch_export(offset).module()
    enc = _encoder()
    for seq in LENGTHS:
        x = torch.from_numpy(_inputs(seq))
        got = module(x)
        assert got.shape == x.shape
        assert torch.equal(got, enc.rotate(x, offset=offset))


@pytest.mark.skipif("torch" not in BACKENDS,
                    reason="torch backend not selected (PEREGISTRY_BACKENDS)")
def test_torch_export_still_rejects_an_offset_beyond_int64() -> None:
    with pytest.raises(ValueError, match=f"offset={2**63} with s"):
        _torch_export(2**63)
