"""Property-based tests (hypothesis): random shapes, dtypes, positions and options for every
kind — absolute (sinusoidal, learned, learned-2d), rotary (rotary, mrope), bias (t5, alibi) and
relative-embedding (shaw, transformer-xl) — on every selected backend.

Example counts are modest (``max_examples=25``, 10 when JAX is the only backend selected, as in
tox's jax env: eager JAX compiles every operation again for each new shape, about 25 ms each, so a
draw costs a second there) so the whole tox run stays fast; each property is a law or a formula
that must hold for *every* draw, not a sample of fixed cases.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import peregistry as per
from peregistry.registry import default_registry
from peregistry.testing._core import EPS, selected_backends

BACKENDS = [b.name for b in selected_backends()]
SETTINGS = settings(max_examples=10 if BACKENDS == ["jax"] else 25, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

shapes = st.lists(st.integers(1, 5), min_size=0, max_size=3).map(tuple)
even_dims = st.integers(1, 24).map(lambda n: 2 * n)


def backend(name: str) -> Any:
    import importlib

    b = default_registry.backend(name)
    importlib.import_module(b.name)
    return b


def to_b(name: str, a: Any, dtype: str | None = None) -> Any:
    b = backend(name)
    return b.from_numpy(np.asarray(a), dtype=None if dtype is None else b.float_dtypes()[dtype])


def to_np(name: str, x: Any) -> Any:
    return np.asarray(backend(name).to_numpy(x), dtype=np.float64)


def float_names(name: str) -> list[str]:
    return [n for n in backend(name).float_dtypes() if n in ("float32", "float64")]


def tol(name: str, dtype: str) -> float:
    return 1e-9 if dtype == "float64" else 2e-5


# -- absolute -------------------------------------------------------------------------------------
@pytest.mark.parametrize("bk", BACKENDS)
@SETTINGS
@given(dim=even_dims, shape=shapes, base=st.floats(2.0, 1e5), data=st.data(),
       layout=st.sampled_from(["interleaved", "split"]))
def test_sinusoidal_is_the_paper_formula(bk: str, dim: int, shape: tuple[int, ...], base: float,
                                         layout: str, data: st.DataObject) -> None:
    pos = data.draw(st.lists(st.integers(0, 4096), min_size=math.prod(shape),
                             max_size=math.prod(shape)))
    p = np.asarray(pos, dtype=np.int64).reshape(shape)
    dt = data.draw(st.sampled_from(float_names(bk)))
    enc = per.get_encoder("sinusoidal", dim=dim, base=base, layout=layout)
    out = enc.encode(to_b(bk, p), dtype=backend(bk).float_dtypes()[dt])
    assert tuple(out.shape) == (*shape, dim)
    assert backend(bk).dtype_name(out.dtype) == dt
    w = base ** (-2.0 * np.arange(dim // 2) / dim)
    a = p[..., None] * w
    want = (np.stack([np.sin(a), np.cos(a)], -1).reshape(*shape, dim) if layout == "interleaved"
            else np.concatenate([np.sin(a), np.cos(a)], -1))
    np.testing.assert_allclose(to_np(bk, out), want, atol=tol(bk, dt) * 8)


@pytest.mark.parametrize("bk", BACKENDS)
@SETTINGS
@given(n=st.integers(1, 40), dim=st.integers(1, 12), shape=shapes, seed=st.integers(0, 2**16))
def test_learned_is_a_table_lookup(bk: str, n: int, dim: int, shape: tuple[int, ...],
                                   seed: int) -> None:
    enc = per.get_encoder("learned", num_positions=n, dim=dim)
    params = enc.init(bk, seed=seed)
    p = np.random.default_rng(seed).integers(0, n, size=shape)
    out = enc.encode(to_b(bk, p), params=params)
    table = to_np(bk, params["table"])
    np.testing.assert_allclose(to_np(bk, out), table[p], rtol=1e-6)
    with pytest.raises(ValueError, match="num_positions"):
        enc.encode(to_b(bk, np.full(shape or (1,), n)), params=params)


@pytest.mark.parametrize("bk", BACKENDS)
@SETTINGS
@given(h=st.integers(1, 9), w=st.integers(1, 9), dim=st.integers(1, 8), shape=shapes,
       seed=st.integers(0, 2**16))
def test_learned_2d_is_col_then_row(bk: str, h: int, w: int, dim: int, shape: tuple[int, ...],
                                    seed: int) -> None:
    enc = per.get_encoder("learned-2d", height=h, width=w, dim=dim)
    params = enc.init(bk, seed=seed)
    rng = np.random.default_rng(seed)
    rc = np.stack([rng.integers(0, h, size=shape), rng.integers(0, w, size=shape)], -1)
    out = to_np(bk, enc.encode(to_b(bk, rc), params=params))
    row, col = to_np(bk, params["row"]), to_np(bk, params["col"])
    want = np.concatenate([col[rc[..., 1]], row[rc[..., 0]]], -1)
    np.testing.assert_allclose(out, want, rtol=1e-6)


# -- rotary ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("bk", BACKENDS)
@SETTINGS
@given(dim=even_dims, batch=shapes, seq=st.integers(1, 9), data=st.data(),
       layout=st.sampled_from(["half", "interleaved"]), theta=st.floats(10.0, 1e6))
def test_rotary_keeps_shape_dtype_norm_and_is_relative(
        bk: str, dim: int, batch: tuple[int, ...], seq: int, layout: str, theta: float,
        data: st.DataObject) -> None:
    rd = data.draw(st.integers(1, dim // 2).map(lambda n: 2 * n))
    dt = data.draw(st.sampled_from(float_names(bk)))
    real = data.draw(st.booleans())
    enc = per.get_encoder("rotary", dim=dim, rotary_dim=rd, layout=layout, theta=theta)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.standard_normal((*batch, seq, dim))
    pos = rng.integers(0, 2000, size=seq).astype(np.float64 if real else np.int64)
    out = enc.rotate(to_b(bk, x, dt), to_b(bk, pos))
    assert tuple(out.shape) == x.shape and backend(bk).dtype_name(out.dtype) == dt
    o = to_np(bk, out)
    # Rotations keep norms whatever their angles' errors: |x|² is off by the cast of x to dt,
    # the rounding of cos/sin and of the rotation's products and sum: a few eps relative.
    eps = EPS[dt]
    np.testing.assert_allclose(np.sum(o**2, -1), np.sum(x**2, -1), rtol=16 * eps, atol=0)
    np.testing.assert_array_equal(o[..., rd:], x[..., rd:].astype(np.float32 if dt == "float32"
                                                                    else np.float64))
    # <R(m)q, R(n)k> = <R(m+s)q, R(n+s)k>. Each angle p·ω (ω <= 1) is computed in the widest
    # float dtype of the backend (peregistry/rope/_angles.py: float64 when there is one, whatever
    # dt is) and is off by up to |p|·eps of that dtype, which moves a dot product by up to
    # |q|·|k| times that angle's error; cos/sin and the rotated vectors rounded to dt add a few
    # eps(dt)·|q|·|k| (16).
    q, k = rng.standard_normal(dim), rng.standard_normal(dim)
    m, n, s = (int(v) for v in rng.integers(0, 1000, size=3))
    ps = np.asarray([m, n, m + s, n + s])
    xs = to_b(bk, np.stack([q, k, q, k]), dt)
    r = to_np(bk, enc.rotate(xs, to_b(bk, ps)))
    angle_eps = EPS["float64" if "float64" in float_names(bk) else "float32"]
    law = (angle_eps * float(ps.sum()) + 16 * eps) * float(np.linalg.norm(q) * np.linalg.norm(k))
    np.testing.assert_allclose(r[0] @ r[1], r[2] @ r[3], rtol=0, atol=law)


@pytest.mark.parametrize("bk", BACKENDS)
@SETTINGS
@given(data=st.data(), interleaved=st.booleans(), seq=st.integers(1, 8))
def test_mrope_on_equal_axes_is_rotary(bk: str, data: st.DataObject, interleaved: bool,
                                       seq: int) -> None:
    axes = data.draw(st.integers(1, 4))
    if interleaved:
        per_axis = data.draw(st.integers(1, 4))
        sections = (per_axis,) * axes  # interleavable: every axis the same count
    else:
        sections = tuple(data.draw(st.lists(st.integers(0, 6), min_size=axes, max_size=axes)
                                   .filter(lambda s: sum(s) > 0)))
    dim = 2 * sum(sections)
    enc = per.get_encoder("mrope", dim=dim, sections=sections, interleaved=interleaved)
    rope = per.get_encoder("rotary", dim=dim)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = to_b(bk, rng.standard_normal((2, seq, dim)), "float32")
    p = rng.integers(0, 5000, size=seq)
    a = to_np(bk, enc.rotate(x, to_b(bk, np.stack([p] * axes))))
    b = to_np(bk, rope.rotate(x, to_b(bk, p)))
    np.testing.assert_array_equal(a, b)


# -- bias -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("bk", BACKENDS)
@SETTINGS
@given(heads=st.integers(1, 12), nq=st.integers(1, 6), nk=st.integers(1, 6),
       shift=st.integers(-50, 50), seed=st.integers(0, 2**16))
def test_alibi_is_minus_slope_times_distance(bk: str, heads: int, nq: int, nk: int, shift: int,
                                             seed: int) -> None:
    enc: Any = per.get_encoder("alibi", num_heads=heads)
    rng = np.random.default_rng(seed)
    q, k = rng.integers(0, 500, size=nq), rng.integers(0, 500, size=nk)
    out = to_np(bk, enc.bias(to_b(bk, q), to_b(bk, k)))
    assert out.shape == (heads, nq, nk)
    want = -np.asarray(enc.slopes)[:, None, None] * np.abs(q[:, None] - k[None, :])
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bk", BACKENDS)
@SETTINGS
@given(heads=st.integers(1, 6), buckets=st.integers(4, 40), extra=st.integers(1, 200),
       bidirectional=st.booleans(), lead=shapes.filter(lambda s: len(s) <= 2),
       n=st.integers(1, 6), shift=st.integers(0, 300), seed=st.integers(0, 2**16))
def test_t5_depends_only_on_k_minus_q(bk: str, heads: int, buckets: int, extra: int,
                                      bidirectional: bool, lead: tuple[int, ...], n: int,
                                      shift: int, seed: int) -> None:
    # max_distance beyond the exact buckets (fewer than num_buckets), as T5 requires
    enc = per.get_encoder("t5", num_heads=heads, num_buckets=buckets, max_distance=buckets + extra,
                          bidirectional=bidirectional)
    params = enc.init(bk, seed=seed)
    rng = np.random.default_rng(seed)
    q, k = rng.integers(0, 1000, size=(*lead, n)), rng.integers(0, 1000, size=(*lead, n + 1))
    a = to_np(bk, enc.bias(to_b(bk, q), to_b(bk, k), params=params))
    b = to_np(bk, enc.bias(to_b(bk, q + shift), to_b(bk, k + shift), params=params))
    assert a.shape == (*lead, heads, n, n + 1)
    np.testing.assert_array_equal(a, b)


# -- relative-embedding ---------------------------------------------------------------------------
@pytest.mark.parametrize("bk", BACKENDS)
@SETTINGS
@given(max_distance=st.integers(1, 10), dim=st.integers(1, 6), nq=st.integers(1, 6),
       nk=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_shaw_indexes_clipped_distance(bk: str, max_distance: int, dim: int, nq: int, nk: int,
                                       seed: int) -> None:
    enc = per.get_encoder("shaw", max_distance=max_distance, dim=dim)
    params = enc.init(bk, seed=seed)
    rng = np.random.default_rng(seed)
    q, k = rng.integers(0, 40, size=nq), rng.integers(0, 40, size=nk)
    out = to_np(bk, enc.embed(to_b(bk, q), to_b(bk, k), params=params))
    idx = np.clip(k[None, :] - q[:, None], -max_distance, max_distance) + max_distance
    np.testing.assert_allclose(out, to_np(bk, params["table"])[idx], rtol=1e-6)


@pytest.mark.parametrize("bk", BACKENDS)
@SETTINGS
@given(dim=even_dims, nq=st.integers(1, 6), nk=st.integers(1, 6), shift=st.integers(0, 2000),
       data=st.data())
def test_transformer_xl_depends_only_on_q_minus_k(bk: str, dim: int, nq: int, nk: int, shift: int,
                                                  data: st.DataObject) -> None:
    enc = per.get_encoder("transformer-xl", dim=dim)
    dt = data.draw(st.sampled_from(float_names(bk)))
    fdt = backend(bk).float_dtypes()[dt]
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    q, k = rng.integers(0, 2000, size=nq), rng.integers(0, 2000, size=nk)
    a = enc.embed(to_b(bk, q), to_b(bk, k), dtype=fdt)
    b = to_np(bk, enc.embed(to_b(bk, q + shift), to_b(bk, k + shift), dtype=fdt))
    assert tuple(a.shape) == (nq, nk, dim) and backend(bk).dtype_name(a.dtype) == dt
    np.testing.assert_allclose(to_np(bk, a), b, atol=tol(bk, dt) * 64)
