"""The sinusoidal encoder against the paper's formula (float64, written independently here), the
seed examples, every backend, and its errors."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import peregistry as per

SEED_POS2_D8 = [0.9093, -0.4161, 0.1987, 0.9801, 0.0200, 0.9998, 0.0020, 0.9999]
# The seed's own printout for base (n) = 100, d = 4, positions 0..3.
SEED_BASE100_D4 = [
    [0.0, 1.0, 0.0, 1.0],
    [0.84147098, 0.54030231, 0.09983342, 0.99500417],
    [0.90929743, -0.41614684, 0.19866933, 0.98006658],
    [0.14112001, -0.9899925, 0.29552021, 0.95533649],
]


def paper(positions: Any, dim: int, base: float = 10000.0, layout: str = "interleaved") -> Any:
    """Vaswani et al. 2017, eq. in §3.5, evaluated element by element in Python float64."""
    pos = np.asarray(positions, dtype=np.float64)
    out = np.zeros((*pos.shape, dim))
    for idx in np.ndindex(pos.shape):
        for i in range(dim // 2):
            angle = pos[idx] / base ** (2 * i / dim)
            if layout == "interleaved":
                out[(*idx, 2 * i)] = math.sin(angle)
                out[(*idx, 2 * i + 1)] = math.cos(angle)
            else:
                out[(*idx, i)] = math.sin(angle)
                out[(*idx, dim // 2 + i)] = math.cos(angle)
    return out


def f64_or_f32(backend: Any) -> str:
    return "float64" if "float64" in backend.float_dtypes() else "float32"


def test_seed_vector_pos2_d8(backend: Any) -> None:
    enc = per.get_encoder("sinusoidal", dim=8)
    out = backend.to_numpy(enc.encode(backend.from_numpy(np.asarray(2))))
    # The seed prints 4 decimals (its last entry truncates cos(0.002) = 0.999998 to 0.9999).
    np.testing.assert_allclose(out, SEED_POS2_D8, atol=1e-4, rtol=0)
    np.testing.assert_allclose(out, paper(2, 8), atol=8 * 2.0**-23)


def test_seed_matrix_base100_d4(backend: Any) -> None:
    enc = per.get_encoder("sinusoidal", dim=4, base=100)
    name = f64_or_f32(backend)
    out = backend.to_numpy(enc.encode(backend.from_numpy(np.arange(4)),
                                      dtype=backend.float_dtypes()[name]))
    np.testing.assert_allclose(out, SEED_BASE100_D4, atol=1e-8)


@pytest.mark.parametrize("layout", ["interleaved", "split"])
@pytest.mark.parametrize(("dim", "base"), [(2, 10000.0), (8, 10000.0), (64, 10000.0),
                                           (128, 500.0), (6, 1e6)])
def test_matches_paper_formula(backend: Any, dim: int, base: float, layout: str) -> None:
    enc = per.get_encoder("sinusoidal", dim=dim, base=base, layout=layout)
    pos = np.asarray([[0, 1, 2, 3], [17, 255, 1000, 4095]])
    name = f64_or_f32(backend)
    out = backend.to_numpy(enc.encode(backend.from_numpy(pos), dtype=backend.float_dtypes()[name]))
    eps = 2.0**-52 if name == "float64" else 2.0**-23
    # float64: the angle error is ~eps·p; float32: a few ulps of sin/cos of a reduced angle.
    tol = 16 * eps * (4096 if name == "float64" else 1.0)
    np.testing.assert_allclose(out, paper(pos, dim, base, layout), atol=tol, rtol=0)


def test_split_is_all_sines_then_all_cosines_of_the_same_frequencies() -> None:
    pos = np.arange(10)
    inter = per.get_encoder("sinusoidal", dim=16).encode(pos)
    split = per.get_encoder("sinusoidal", dim=16, layout="split").encode(pos)
    np.testing.assert_array_equal(split[:, :8], inter[:, 0::2])
    np.testing.assert_array_equal(split[:, 8:], inter[:, 1::2])


def test_marian_split_layout_matches_transformers() -> None:
    pytest.importorskip("transformers", reason="transformers is the reference only in the torch env")
    import torch
    from transformers.models.marian.modeling_marian import MarianSinusoidalPositionalEmbedding

    emb = MarianSinusoidalPositionalEmbedding(64, 32)
    # transformers 5 fills the table in MarianPreTrainedModel._init_weights via create_weight().
    weight = emb.create_weight().detach().to(torch.float64).numpy()
    ours = per.get_encoder("sinusoidal", dim=32, layout="split").encode(np.arange(64))
    np.testing.assert_allclose(ours, weight, atol=8 * 2.0**-23)


@pytest.mark.parametrize("position", [2**16, 2**20, 2**20 + 12345, 2**23])
def test_accurate_at_large_positions_on_every_backend(backend: Any, position: int) -> None:
    enc = per.get_encoder("sinusoidal", dim=128)
    pos = np.asarray([position, position + 1], dtype=np.int64)
    ref = paper(pos, 128)
    out = backend.to_numpy(enc.encode(backend.from_numpy(pos), dtype=backend.float_dtypes()["float32"]))
    assert np.max(np.abs(out - ref)) <= 1e-5


def test_naive_float32_would_fail_the_large_position_bound() -> None:
    """The float32 recipe ``sin(float32(p) * float32(ω))`` is far off at 2**20: the bound above
    is meaningful."""
    p = np.float32(2**20)
    omega = (10000.0 ** (-2 * np.arange(64) / 128)).astype(np.float32)
    naive = np.sin(p * omega).astype(np.float64)
    assert np.max(np.abs(naive - paper([2**20], 128)[0, 0::2])) > 1e-2


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
def test_half_precision_is_computed_wide_and_cast_once(backend: Any, name: str) -> None:
    if name not in backend.float_dtypes():
        pytest.skip(f"{backend.name} has no {name}")
    enc = per.get_encoder("sinusoidal", dim=32)
    pos = backend.from_numpy(np.arange(0, 5000, 7))
    got = enc.encode(pos, dtype=backend.float_dtypes()[name])
    wide = enc.encode(pos, dtype=backend.float_dtypes()["float32"])
    xp = backend.namespace()
    once = xp.astype(wide, backend.float_dtypes()[name])
    # Rounding the accurate value once; float32 noise (~1e-7) can flip a rounding tie at most.
    diff = np.abs(backend.to_numpy(got) - backend.to_numpy(once))
    eps = {"float16": 2.0**-10, "bfloat16": 2.0**-7}[name]
    assert np.mean(diff == 0) > 0.999
    assert diff.max() <= eps


@pytest.mark.parametrize("int_dtype", ["int8", "int16", "int32", "int64", "uint8"])
def test_every_integer_position_dtype(backend: Any, int_dtype: str) -> None:
    xp = backend.namespace()
    if not hasattr(xp, int_dtype):
        pytest.skip(f"{backend.name} has no {int_dtype}")
    if int_dtype == "int64" and "float64" not in backend.float_dtypes():
        pytest.skip(f"{backend.name} without 64-bit types (jax_enable_x64 off) has no int64")
    pos = xp.asarray([0, 3, 100], dtype=getattr(xp, int_dtype))
    out = backend.to_numpy(per.get_encoder("sinusoidal", dim=8).encode(pos, dtype=backend.float_dtypes()["float32"]))
    np.testing.assert_allclose(out, paper([0, 3, 100], 8), atol=8 * 2.0**-23)


def test_real_positions_are_continuous() -> None:
    out = per.get_encoder("sinusoidal", dim=8).encode(np.asarray([0.5, 2.25]))
    np.testing.assert_allclose(out, paper([0.5, 2.25], 8), atol=1e-15)


def test_python_numbers_and_lists_give_numpy() -> None:
    enc = per.get_encoder("sinusoidal", dim=8)
    assert isinstance(enc.encode(2), np.ndarray)
    assert enc.encode([[1, 2]]).shape == (1, 2, 8)
    assert enc.encode(2, dtype="float32").dtype == np.float32


def test_dtype_none_is_the_namespace_default(backend: Any) -> None:
    out = per.get_encoder("sinusoidal", dim=4).encode(backend.from_numpy(np.arange(3)))
    assert out.dtype == backend.default_float_dtype()


@pytest.mark.parametrize(
    ("options", "exc", "pattern"),
    [
        ({"dim": 7}, ValueError, r"sinusoidal: option 'dim' must be a positive even integer, got 7"),
        ({"dim": 0}, ValueError, r"option 'dim' must be a positive even integer, got 0"),
        ({"dim": 8, "base": 0}, ValueError, r"option 'base' must be a finite number > 0 .*got 0"),
        ({"dim": 8, "base": -5.0}, ValueError, r"option 'base' .* got -5.0"),
        ({"dim": 8, "layout": "halves"}, ValueError,
         r"option 'layout' must be one of 'interleaved', 'split', got 'halves'"),
        ({"dim": 8, "bse": 1.0}, TypeError, r"unknown option 'bse'; valid options: dim, base, layout"),
        ({}, TypeError, r"missing required option 'dim'"),
    ],
)
def test_bad_options(options: dict[str, Any], exc: type, pattern: str) -> None:
    with pytest.raises(exc, match=pattern):
        per.get_encoder("sinusoidal", **options)


@pytest.mark.parametrize(
    ("positions", "pattern"),
    [
        (np.asarray(["a", "b"]), r"positions must have an integer or real floating dtype, got dtype <U1"),
        (np.asarray([True, False]), r"positions must have an integer or real floating dtype, got dtype bool"),
        (np.asarray([1 + 2j]), r"positions must have an integer or real floating dtype"),
        ("abc", r"expected an array of a registered backend .* or a Python number/sequence, "
                r"got builtins.str"),
        ([["a"]], r"positions must be numbers, got \[\['a'\]\]"),
        (object(), r"expected an array of a registered backend"),
    ],
)
def test_non_numeric_positions_are_type_errors(positions: Any, pattern: str) -> None:
    with pytest.raises(TypeError, match=pattern):
        per.get_encoder("sinusoidal", dim=8).encode(positions)


def test_bad_dtype_argument(backend: Any) -> None:
    xp = backend.namespace()
    with pytest.raises(TypeError, match=r"dtype=.* is not a real floating dtype of .*; allowed: None"):
        per.get_encoder("sinusoidal", dim=8).encode(backend.from_numpy(np.arange(2)), dtype=xp.int32)
