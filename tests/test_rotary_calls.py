"""Rotary encoders (``rotary``, ``mrope``, plugins) called as models call them, checked bit for bit
against a computation that keeps nothing, on every selected backend (``PEREGISTRY_BACKENDS``).

In eager mode, integer positions read rows of the encoder's table of positions, kept in the one
store of computed tables (``peregistry.rope._tables.STORE``): ``positions=None`` at an int
``offset`` (prefill, decode) slices it, integer ids in ``rotate`` and ``cos_sin`` gather from it.
The reference is the same call with nothing kept (:func:`computed`: the store's budget 0, which
empties it, so every table is computed and none is kept; the budget restored after), the same
positions as real numbers (never served from a table), or RoFormer's formula in float64 NumPy
(:func:`formula`, written here: independent of the package's code and of anything it keeps).
Never another encoder of equal options: it reads the same store, and compares the store with
itself. Every test runs with the store on at its default budget (:func:`store_on`), whatever
``PEREGISTRY_TABLE_CACHE_BYTES`` says, so the rows under test are served from it. Checked
through:

* offsets, ids and dtypes changing from call to call, decode loops making new ids every step,
  positions written in place, Python sequences, one grouped-query ``k`` after its ``q``;
* the errors of every call (shapes, dtypes, offsets whose positions would wrap), and a plugin
  that validates the positions' values seeing every call;
* multi-axis tokens (text and image tokens of M-RoPE, a plugin mixing axes), in each dtype and
  on each device of array-api-strict;
* tables made in ``torch.inference_mode`` or inside ``torch.func`` transforms (never kept where
  training cannot use them), ``torch.compile`` after eager calls (compiled once), JAX's x64
  switched on after tables were made, one encoder serving two frameworks at one offset;
* torch's rotation through its pure path on one or several threads, and through the kernel's
  plans for views of other strides and tables that broadcast differently.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry.encoders.rotary import Rotary
from peregistry.rope import (
    Frequencies,
    MultiAxisRotary,
    apply_rotary,
    apply_rotation,
    clear_caches,
    cos_sin,
    inv_freq,
    set_table_cache_bytes,
    table_cache_bytes,
)
from peregistry.rope._tables import DEFAULT_BUDGET, STORE

OPTIONS: dict[str, dict[str, Any]] = {"rotary": {"dim": 16},
                                      "mrope": {"dim": 16, "sections": (2, 3, 3)}}


def _np(backend: Any, a: Any) -> Any:
    return np.asarray(backend.to_numpy(a))


@pytest.fixture(autouse=True)
def store_on() -> Iterator[None]:
    """The store at its default budget for each test (with a budget of 0 in the environment
    the calls under test would compute, like their references, and the tests prove nothing);
    the budget before restored after."""
    budget = table_cache_bytes()[1]
    set_table_cache_bytes(DEFAULT_BUDGET)
    try:
        yield
    finally:
        set_table_cache_bytes(budget)


def computed(fn: Callable[[], Any]) -> Any:
    """``fn()`` with nothing kept: the store's budget 0 (which empties it; every table
    computed, none kept, which is checked), the budget restored after."""
    budget = table_cache_bytes()[1]
    set_table_cache_bytes(0)
    try:
        out = fn()
        assert table_cache_bytes()[0] == 0, "the reference kept tables"
        return out
    finally:
        set_table_cache_bytes(budget)


def formula(x: Any, pos: Any, *, theta: float = 10000.0, axes: tuple[int, ...] | None = None,
            ) -> Any:
    """RoFormer's rotation (Su et al. 2021, §3.4) of ``x`` ``(..., seq, d)`` in float64 NumPy,
    half layout (pairs ``(i, i + d/2)``): pair ``i`` turns by ``p·θ^(-2i/d)``. ``pos`` broadcasts
    against ``x.shape[:-1]``; with ``axes`` (M-RoPE) it is ``(num_axes, ...)`` and pair ``i``
    turns with the position of axis ``axes[i]``."""
    x = np.asarray(x, dtype=np.float64)
    h = x.shape[-1] // 2
    omega = theta ** (-np.arange(h, dtype=np.float64) * 2.0 / x.shape[-1])
    p = np.asarray(pos, dtype=np.float64)
    by_pair = p[..., None] if axes is None else np.moveaxis(p, 0, -1)[..., list(axes)]
    angle = by_pair * omega
    cos, sin = np.cos(angle), np.sin(angle)
    a, b = x[..., :h], x[..., h:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def formula_tol(x: Any) -> float:
    """How far a float32 rotation of ``x`` may be from :func:`formula`, in float32 ulps of the
    largest pair norm ``r`` (each output element is at most ``r``): 0.5 for the tables' rounding
    to float32, 1.5 for the two products and their sum, and the angle's error times ``r``:
    ~2 float64 ulps of ``p·ω`` where the backend has float64 (below 1e-12 at the positions
    here), else (JAX without x64) the reduced angle ``2π·frac(p·ω/2π)`` computed in float32,
    a few ulps of ``π``: 16 ulps in all."""
    x = np.asarray(x, dtype=np.float64)
    h = x.shape[-1] // 2
    r = float(np.max(np.hypot(x[..., :h], x[..., h:])))
    return 16 * float(np.finfo(np.float32).eps) * r


def _ids(name: str, values: Any) -> Any:
    """Positions of ``name`` for tokens at ``values``: M-RoPE's three axes at values, +1, +2."""
    values = np.asarray(values)
    return values if name == "rotary" else np.stack([values, values + 1, values + 2])


def _torch() -> Any:
    torch = pytest.importorskip("torch")
    if "torch" not in BACKENDS:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    return torch


def _stored_tensors() -> list[Any]:
    """The torch tensors of the store's entries."""
    import torch

    out = []
    for value, _ in list(STORE._entries.values()):
        for a in value if isinstance(value, tuple) else (value,):
            if isinstance(a, torch.Tensor):
                out.append(a)
    return out


# -- rows of the table of positions against computing ------------------------------------------


def test_rotate_at_offsets_and_in_another_dtype_equals_computing(backend: Any) -> None:
    enc: Any = per.get_encoder("rotary", dim=16)
    rng = np.random.default_rng(0)
    x = backend.from_numpy(rng.standard_normal((1, 2, 3, 16)).astype(np.float32))
    ref = _np(backend, computed(lambda: enc.rotate(x, backend.from_numpy(np.arange(4, 7)))))
    for offset in (4, 5, 4):
        got = _np(backend, enc.rotate(x, offset=offset))
        want = computed(lambda o=offset: enc.rotate(x, backend.from_numpy(np.arange(o, o + 3))))
        np.testing.assert_array_equal(got, _np(backend, want), err_msg=f"offset {offset}")
    clear_caches()
    np.testing.assert_array_equal(_np(backend, enc.rotate(x, offset=4)), ref)
    wide = backend.float_dtypes().get("float64")
    if wide is not None:  # another dtype at the same offset: its own float64 rows
        x64 = backend.from_numpy(rng.standard_normal((1, 2, 3, 16)))
        out = enc.rotate(x64, offset=4)
        assert out.dtype == wide
        ref64 = computed(lambda: enc.rotate(x64, backend.from_numpy(np.arange(4, 7))))
        np.testing.assert_array_equal(_np(backend, out), _np(backend, ref64))


@pytest.mark.parametrize("name", ["rotary", "mrope"])
def test_rows_served_from_the_store_equal_the_formula(backend: Any, name: str) -> None:
    """A prefill and decode steps at int offsets (slices of the table of positions, across its
    first growth at 1024), integer ids (gathered rows) and one token's ids (M-RoPE: a text
    token's row, an image token's entries), each called twice: every result equals RoFormer's
    formula in float64 NumPy, which shares nothing with the package's tables."""
    enc: Any = per.get_encoder(name, **OPTIONS[name])
    axes = None if name == "rotary" else (0, 0, 1, 1, 1, 2, 2, 2)  # sections (2, 3, 3)
    rng = np.random.default_rng(6)
    prompt = rng.standard_normal((2, 4, 5, 16)).astype(np.float32)
    token = rng.standard_normal((2, 4, 1, 16)).astype(np.float32)
    one = token[:1]
    calls: list[tuple[Any, Any, Any]] = []  # (x, positions, positions or offset to pass)
    for x, offset in ((prompt, 0), (prompt, 1021), (token, 1023), (token, 1024), (token, 1025),
                      (token, 3000), (token, 7)):
        text = np.arange(offset, offset + x.shape[-2])  # (M-RoPE: every axis there)
        calls.append((x, text if axes is None else np.stack([text] * 3), offset))
    for x, ids in ((prompt, rng.integers(0, 3000, (2, 1, 5))),
                   (token, np.array([[[1030]], [[5]]]))):
        calls.append((x, _ids(name, ids), _ids(name, ids)))
    if name == "mrope":  # one token: every axis at one position (text), or apart (an image's)
        for axes_at in ([2000, 2000, 2000], [2001, 40, 9], [7, 7, 7]):
            ids = np.array(axes_at).reshape(3, 1, 1, 1)
            calls.append((one, ids, ids))
    for x, pos, arg in calls:
        want = formula(x, pos, axes=axes)
        for again in (False, True):
            if isinstance(arg, int):
                got = enc.rotate(backend.from_numpy(x), offset=arg)
            else:
                got = enc.rotate(backend.from_numpy(x), backend.from_numpy(arg))
            err = float(np.max(np.abs(_np(backend, got).astype(np.float64) - want)))
            assert err <= formula_tol(x), (
                f"max |rotate - formula| = {err:.3g} > {formula_tol(x):.3g} at positions "
                f"{np.asarray(pos).ravel()[:6].tolist()}, again={again}")
    assert table_cache_bytes()[0] > 0, "no table was kept: the store served nothing"


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("shape", [(), (1,), (5,), (2, 1, 3)])
def test_cos_sin_at_integer_ids_equals_real_positions(backend: Any, layout: str,
                                                      shape: tuple[int, ...]) -> None:
    """Eager ``cos_sin`` at integer ids reads rows of the table of positions (float32 and
    float64 outputs); they equal ``cos_sin`` at the same positions as real numbers, which no
    table serves."""
    enc: Any = per.get_encoder("rotary", dim=16, rotary_dim=12, layout=layout)
    ids = np.random.default_rng(1).integers(0, 3000, size=shape)
    for name, dt in backend.float_dtypes().items():
        cos, sin = enc.cos_sin(backend.from_numpy(ids), dtype=dt)
        fc, fs = enc.cos_sin(backend.from_numpy(ids, dtype=backend.wide_float_dtype()), dtype=dt)
        assert cos.dtype == dt and tuple(cos.shape) == (*shape, 12), name
        np.testing.assert_array_equal(_np(backend, cos).astype(np.float64),
                                      _np(backend, fc).astype(np.float64), name)
        np.testing.assert_array_equal(_np(backend, sin).astype(np.float64),
                                      _np(backend, fs).astype(np.float64), name)


@pytest.mark.parametrize("value", [-3, 40, 2**22])
def test_a_decode_position_outside_the_table_equals_computing(backend: Any, value: int) -> None:
    """A negative position, or one beyond what the table may hold, between decode steps the
    table serves: each step has the bits of computing it."""
    enc: Any = per.get_encoder("rotary", dim=16)
    x = backend.from_numpy(np.random.default_rng(2).standard_normal((1, 4, 1, 16))
                           .astype(np.float32))
    for v in (5, 6, value, 7):
        ids = backend.from_numpy(np.full((1, 1, 1), v))
        got = _np(backend, enc.rotate(x, ids))
        np.testing.assert_array_equal(got, _np(backend, computed(lambda i=ids: enc.rotate(x, i))),
                                      err_msg=f"position {v}")


@pytest.mark.parametrize("name", ["rotary", "mrope"])
@pytest.mark.parametrize("shape", [(1, 1, 1), (2, 1, 3)], ids=["decode", "batch"])
def test_decode_loop_with_new_ids_every_step_equals_computing(backend: Any, name: str,
                                                               shape: tuple[int, ...]) -> None:
    enc: Any = per.get_encoder(name, **OPTIONS[name])
    rng = np.random.default_rng(0)
    x = backend.from_numpy(rng.standard_normal((shape[0], 4, shape[2], 16)).astype(np.float32))
    enc.rotate(x, backend.from_numpy(_ids(name, rng.integers(0, 900, shape))))
    for step in range(4):  # a new positions array every call, as a decoding loop makes them
        ids = backend.from_numpy(_ids(name, rng.integers(0, 3000, shape)))
        got = _np(backend, enc.rotate(x, ids))
        want = _np(backend, computed(lambda i=ids: enc.rotate(x, i)))
        np.testing.assert_array_equal(got, want, err_msg=f"step {step}")


def test_repeated_calls_see_every_change(backend: Any) -> None:
    """Calls alike but for x's values, then differing in the offset, the positions, x's shape
    or dtype: each with the bits of computing it and its own errors."""
    enc: Any = per.get_encoder("rotary", dim=16)
    rng = np.random.default_rng(0)

    def arr(shape: tuple[int, ...], dtype: str = "float32") -> Any:
        return backend.from_numpy(rng.standard_normal(shape).astype(np.float32),
                                  dtype=backend.float_dtypes()[dtype])

    def ref(x: Any, pos: Any) -> Any:
        return _np(backend, computed(lambda: enc.rotate(x, pos)))

    x1, x2 = arr((1, 2, 3, 16)), arr((1, 2, 3, 16))
    for off in (4, 4, 5, 5, 4):
        for x in (x1, x2):
            want = ref(x, backend.from_numpy(np.arange(off, off + 3)))
            np.testing.assert_array_equal(_np(backend, enc.rotate(x, offset=off)), want)
    ids = backend.from_numpy(np.array([7, 1, 30]))
    for x in (x1, x2, x1):
        np.testing.assert_array_equal(_np(backend, enc.rotate(x, ids)), ref(x, ids))
    other = backend.from_numpy(np.array([7, 1, 31]))
    np.testing.assert_array_equal(_np(backend, enc.rotate(x1, other)), ref(x1, other))
    x3 = arr((1, 2, 5, 16))  # another shape: positions of 3 do not broadcast over 5
    with pytest.raises(ValueError, match="broadcast"):
        enc.rotate(x3, other)
    with pytest.raises(ValueError, match="only used with positions=None"):
        enc.rotate(x1, other, offset=2)
    with pytest.raises(ValueError, match=r"x.shape\[-1\] should be dim=16"):
        enc.rotate(arr((1, 2, 3, 8)), offset=4)
    if "float64" in backend.float_dtypes():
        x64 = arr((1, 2, 3, 16), "float64")
        out = enc.rotate(x64, other)
        assert out.dtype == x64.dtype
        np.testing.assert_array_equal(_np(backend, out), ref(x64, other))


def test_positions_of_other_dtypes_and_shapes(backend: Any) -> None:
    """int32, batched and real positions after int64 ones: the bits of computing; bool
    positions, params, and an offset with positions: errors."""
    enc: Any = per.get_encoder("rotary", dim=8)
    x = backend.from_numpy(np.ones((1, 2, 3, 8), np.float32))
    enc.rotate(x, backend.from_numpy(np.arange(3)))
    for ids in (np.arange(3, dtype=np.int32), np.arange(3).reshape(1, 3), np.arange(3.0)):
        pos = backend.from_numpy(ids)
        np.testing.assert_array_equal(_np(backend, enc.rotate(x, pos)),
                                      _np(backend, computed(lambda p=pos: enc.rotate(x, p))))
    with pytest.raises(TypeError, match="positions must have"):
        enc.rotate(x, backend.from_numpy(np.array([True, False, True])))
    with pytest.raises(TypeError, match="no learned parameters"):
        enc.rotate(x, backend.from_numpy(np.arange(3)), params={})
    with pytest.raises(ValueError, match="only used with positions=None"):
        enc.rotate(x, backend.from_numpy(np.arange(3)), offset=1)


def test_offsets_whose_positions_would_wrap_are_refused(backend: Any) -> None:
    enc: Any = per.get_encoder("rotary", dim=8)
    x = backend.from_numpy(np.ones((1, 2, 3, 8), np.float32))
    enc.rotate(x, offset=5)
    enc.rotate(x, offset=6)
    with pytest.raises(ValueError, match=r"offset=9223372036854775806 .* would wrap"):
        enc.rotate(x, offset=2**63 - 2)
    with pytest.raises(ValueError, match=r"offset=-9223372036854775809"):
        enc.rotate(x, offset=-(2**63) - 1)


@pytest.mark.parametrize("name", ["rotary", "mrope"])
def test_python_sequences_as_positions(backend: Any, name: str) -> None:
    """Lists, tuples and ints after array positions and offsets: made arrays (and validated)
    on every call."""
    enc: Any = per.get_encoder(name, **OPTIONS[name])
    x = backend.from_numpy(np.ones((1, 2, 3, 16), np.float32))
    enc.rotate(x, offset=4)
    enc.rotate(x, backend.from_numpy(_ids(name, np.arange(3))))
    seqs: list[Any] = ([[0, 1, 2], (0, 1, 2), 2] if name == "rotary"
                       else [_ids(name, np.arange(3)).tolist(), [[1], [2], [3]]])
    for seq in seqs:
        np.testing.assert_array_equal(_np(backend, enc.rotate(x, seq)),
                                      _np(backend, computed(lambda s=seq: enc.rotate(x, s))),
                                      err_msg=str(seq))
    with pytest.raises(TypeError, match="positions must"):
        enc.rotate(x, [0.5, "a", 2] if name == "rotary" else [["a"]] * 3)


@pytest.mark.parametrize("features", ["first", "last"])
def test_repeated_calls_rotate_the_same_features(backend: Any, features: str) -> None:
    """With rotary_features="last" (DeepSeek-V4) the last rotary_dim features turn and the
    first pass through, at ids and at an offset, on every call."""
    enc: Any = per.get_encoder("rotary", dim=16, rotary_dim=8, rotary_features=features,
                               direction="negative")
    rng = np.random.default_rng(1)
    x = backend.from_numpy(rng.standard_normal((2, 5, 16)).astype(np.float32))
    pos = backend.from_numpy(np.arange(5) + 3)
    outs = [_np(backend, enc.rotate(x, pos)) for _ in range(3)]
    outs += [_np(backend, enc.rotate(x, offset=3)) for _ in range(3)]
    for out in outs:
        np.testing.assert_array_equal(out, _np(backend, computed(lambda: enc.rotate(x, pos))))
    kept = slice(0, 8) if features == "last" else slice(8, 16)
    np.testing.assert_array_equal(outs[0][..., kept], _np(backend, x)[..., kept])
    assert np.abs(outs[0] - _np(backend, x)).max() > 0.1


@pytest.mark.parametrize("name", ["rotary", "mrope"])
def test_k_with_fewer_heads_after_q_at_the_same_positions(backend: Any, name: str) -> None:
    """Grouped-query attention: k (fewer heads) after q at the same ids has the bits of
    computing it; ids whose tables do not broadcast into k's shape are refused."""
    enc: Any = per.get_encoder(name, **OPTIONS[name])
    rng = np.random.default_rng(2)
    q = backend.from_numpy(rng.standard_normal((2, 4, 5, 16)).astype(np.float32))
    k = backend.from_numpy(rng.standard_normal((2, 2, 5, 16)).astype(np.float32))
    pos = backend.from_numpy(_ids(name, rng.integers(0, 900, (2, 1, 5))))
    enc.rotate(q, pos)
    got = enc.rotate(k, pos)
    np.testing.assert_array_equal(_np(backend, got),
                                  _np(backend, computed(lambda: enc.rotate(k, pos))))
    wide_pos = backend.from_numpy(rng.integers(0, 900, (2, 4, 5)) if name == "rotary"
                                  else rng.integers(0, 900, (3, 2, 4, 5)))
    enc.rotate(q, wide_pos)  # tables (2, 4, 5, half): no broadcast into k's (2, 2, 5)
    with pytest.raises(ValueError, match="do not broadcast"):
        enc.rotate(k, wide_pos)


class BoundedRotary(Rotary):
    """A plugin that validates the positions' values: every call must reach it."""

    name = "test-bounded-rotary"

    def _positions(self, positions: Any, ctx: Any, what: str = "positions") -> Any:
        positions = super()._positions(positions, ctx, what)
        if int(ctx.xp.max(positions)) >= 100:
            raise ValueError(f"{self.name}: positions must be < 100")
        return positions


def test_a_subclass_validating_values_sees_every_call(backend: Any) -> None:
    enc = BoundedRotary(dim=8)
    x = backend.from_numpy(np.ones((1, 2, 3, 8), np.float32))
    for _ in range(2):
        enc.rotate(x, backend.from_numpy(np.arange(3)))
    with pytest.raises(ValueError, match="must be < 100"):
        enc.rotate(x, backend.from_numpy(np.arange(3) + 98))


# -- positions written in place -------------------------------------------------------------------


def test_torch_positions_written_in_place_give_new_rows() -> None:
    torch = _torch()
    enc: Any = per.get_encoder("rotary", dim=16)
    x = torch.randn(2, 4, 1, 16, generator=torch.Generator().manual_seed(0))
    ids = torch.tensor([[[5]], [[9]]])
    first = enc.rotate(x, ids)
    ids.fill_(7)  # in place: same object, new values
    again = enc.rotate(x, ids)
    torch.testing.assert_close(again, computed(lambda: enc.rotate(x, torch.full((2, 1, 1), 7))),
                               rtol=0, atol=0)
    assert not torch.equal(first, again)
    one = torch.tensor([3])
    a = enc.rotate(x, one)
    one += 1
    torch.testing.assert_close(enc.rotate(x, one), computed(lambda: enc.rotate(x, offset=4)),
                               rtol=0, atol=0)
    assert not torch.equal(a, enc.rotate(x, one))


def test_numpy_positions_written_in_place_give_new_rows() -> None:
    enc: Any = per.get_encoder("rotary", dim=16)
    x = np.random.default_rng(1).standard_normal((1, 4, 1, 16)).astype(np.float32)
    ids = np.array([[[5]]])
    first = enc.rotate(x, ids)
    ids[...] = 700
    want = computed(lambda: enc.rotate(x, np.full((1, 1, 1), 700)))
    np.testing.assert_array_equal(enc.rotate(x, ids), want)
    assert not np.array_equal(enc.rotate(x, ids), first)


# -- multi-axis tokens ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["mrope", "axial", "interleaved"])
def test_one_multi_axis_token_equals_it_in_a_batch(backend: Any, name: str) -> None:
    """One token's multi-axis ids, with every axis at p (text, while decoding) or axes that
    differ (an image token), met once or again, far out, after the table of positions was made
    and with nothing kept: the token rotated alone equals it rotated in a batch of two."""
    opts = {"mrope": OPTIONS["mrope"], "axial": {"dim": 16, "sections": (4, 4, 0)},
            "interleaved": {"dim": 16, "sections": (3, 3, 2), "interleaved": True}}[name]
    enc: Any = per.get_encoder("mrope", **opts)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 4, 1, 16)).astype(np.float32)
    other = rng.standard_normal((1, 4, 1, 16)).astype(np.float32)
    tokens = [[7, 7, 7], [8, 3, 5], [9, 9, 9], [8, 3, 5], [10, 10, 10], [11, 2, 2], [0, 1500, 4],
              [3000, 5, 9], [12, 12, 12], [8, 3, 5]]
    xs = backend.from_numpy(np.concatenate([x, other], axis=2))
    batches = [computed(lambda axes=axes: enc.rotate(xs, backend.from_numpy(np.concatenate(
        [np.array(axes).reshape(3, 1, 1), np.full((3, 1, 1), 77)], axis=-1)))) for axes in tokens]
    enc.rotate(backend.from_numpy(x), offset=1000)  # the table of positions exists
    for axes, both in zip(tokens, batches, strict=True):
        ids = np.array(axes).reshape(3, 1, 1)
        got = enc.rotate(backend.from_numpy(x), backend.from_numpy(ids))
        np.testing.assert_array_equal(_np(backend, got), _np(backend, both)[..., :1, :],
                                      err_msg=str(axes))
    alone = computed(lambda: enc.rotate(backend.from_numpy(x), backend.from_numpy(
        np.array(tokens[1]).reshape(3, 1, 1))))
    np.testing.assert_array_equal(_np(backend, alone), _np(backend, enc.rotate(
        backend.from_numpy(x), backend.from_numpy(np.array(tokens[1]).reshape(3, 1, 1)))))


def test_a_multi_axis_token_in_each_dtype(backend: Any) -> None:
    """One token rotated in float32, then float64, twice: each with the bits of computing."""
    dtypes = [n for n in ("float32", "float64") if n in backend.float_dtypes()]
    enc: Any = per.get_encoder("mrope", **OPTIONS["mrope"])
    ids = backend.from_numpy(np.array([40, 3, 9]).reshape(3, 1, 1))
    for _ in range(2):
        for dt in dtypes:
            x = backend.from_numpy(np.random.default_rng(4).standard_normal((1, 4, 1, 16))
                                   .astype(dt))
            got = enc.rotate(x, ids)
            assert got.dtype == x.dtype
            np.testing.assert_array_equal(_np(backend, got),
                                          _np(backend, computed(lambda x=x: enc.rotate(x, ids))))


def test_a_multi_axis_token_on_each_device() -> None:
    """array-api-strict has several devices whose arrays may not be combined: each device's
    result is on it, with the bits of computing it."""
    if "array_api_strict" not in BACKENDS:
        pytest.skip("array_api_strict not selected by PEREGISTRY_BACKENDS")
    xp = pytest.importorskip("array_api_strict")
    devices = [xp.Device(name) for name in ("CPU_DEVICE", "device1", "device2")]
    enc: Any = per.get_encoder("mrope", **OPTIONS["mrope"])
    x = np.random.default_rng(2).standard_normal((1, 4, 1, 16)).astype(np.float32)
    ids = np.array([40, 3, 9]).reshape(3, 1, 1)
    cpu = devices[0]
    for device in devices + devices:
        xd, pd = xp.asarray(x, device=device), xp.asarray(ids, device=device)
        enc.rotate(xd, offset=1)  # the table of positions of that device exists
        got = enc.rotate(xd, pd)
        assert got.device == device
        fresh = computed(lambda xd=xd, pd=pd: enc.rotate(xd, pd))
        np.testing.assert_array_equal(np.asarray(xp.asarray(got, device=cpu, copy=True)),
                                      np.asarray(xp.asarray(fresh, device=cpu, copy=True)))


class SumOfAxes(MultiAxisRotary):
    """A plugin whose every pair turns with the sum of two axes' positions (its own hook): a
    token's tables are no entries of single-axis rows."""

    name = "test-sum-of-axes"
    dim = per.Option(int, 16, allowed="a positive multiple of 4",
                     check=lambda d: d > 0 and d % 4 == 0)
    num_axes = 2

    def _axis_frequencies(self, seq_len: int | None) -> tuple[Frequencies, ...]:
        half = Frequencies.from_omega(inv_freq(self._values["dim"] // 2))
        return (half, half)

    def _half_cos_sin(self, positions: Any, *, ctx: Any, seq_len: int | None) -> Any:
        freqs = Frequencies.from_omega(inv_freq(self._values["dim"]))
        return cos_sin(positions[0, ...] + positions[1, ...], freqs, ctx=ctx)


def test_a_plugin_mixing_axes_has_its_tokens_computed(backend: Any) -> None:
    enc = SumOfAxes()
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 4, 1, 16)).astype(np.float32)
    other = rng.standard_normal((1, 4, 1, 16)).astype(np.float32)
    tokens = ([3, 9], [4, 4], [5, 11])
    xs = backend.from_numpy(np.concatenate([x, other], axis=2))
    batches = [computed(lambda axes=axes: enc.rotate(xs, backend.from_numpy(np.concatenate(
        [np.array(axes).reshape(2, 1, 1), np.full((2, 1, 1), 40)], axis=-1)))) for axes in tokens]
    enc.rotate(backend.from_numpy(x), offset=100)  # the table of positions exists
    for axes, both in zip(tokens, batches, strict=True):
        ids = np.array(axes).reshape(2, 1, 1)
        got = enc.rotate(backend.from_numpy(x), backend.from_numpy(ids))
        np.testing.assert_array_equal(_np(backend, got), _np(backend, both)[..., :1, :],
                                      err_msg=str(axes))


def test_multi_axis_tables_keep_the_pair_axis_contiguous() -> None:
    """The tables M-RoPE computes are (..., pairs) in order, the layout torch's C kernel takes."""
    torch = _torch()
    enc: Any = per.get_encoder("mrope", **OPTIONS["mrope"])
    tables = enc.tables(torch.randint(0, 900, (3, 2, 7), generator=torch.Generator().manual_seed(1)))
    assert tables.cos.is_contiguous() and tables.sin.is_contiguous()


# -- modes, transforms, compilers, frameworks -----------------------------------------------------


@pytest.mark.parametrize("name", ["rotary", "mrope"])
def test_tables_made_in_inference_mode_serve_training(name: str) -> None:
    """Decode steps (ids and offsets) under torch.inference_mode, then the same positions with
    autograd on: the store holds no inference tensor, the gradient flows, and the values are
    those of computing."""
    torch = _torch()
    enc: Any = per.get_encoder(name, **OPTIONS[name])
    x = torch.randn(1, 4, 1, 16, generator=torch.Generator().manual_seed(2))

    def ids(p: int) -> Any:
        return torch.as_tensor(_ids(name, np.full((1, 1, 1), p)))

    with torch.inference_mode():
        for p in range(3):
            enc.rotate(x, ids(p))
            enc.rotate(x, offset=p)
    assert not any(t.is_inference() for t in _stored_tensors())
    xg = x.clone().requires_grad_(True)
    for p in (2, 3):  # the rows of position 2 were read last in inference mode
        for out, want in ((enc.rotate(xg, ids(p)), computed(lambda p=p: enc.rotate(x, ids(p)))),
                          (enc.rotate(xg, offset=p), computed(lambda p=p: enc.rotate(x, offset=p)))):
            out.sum().backward()
            assert xg.grad is not None
            xg.grad = None
            torch.testing.assert_close(out.detach(), want, rtol=0, atol=0)


def test_nothing_made_inside_torch_func_transforms_is_kept() -> None:
    """Under torch.func transforms, arrays built from plain positions may be wrapped: none is
    kept in the store, and later eager calls (the C kernel reads storage) have the bits of
    computing."""
    torch = _torch()
    clear_caches()
    mrope: Any = per.get_encoder("mrope", dim=64, sections=(8, 12, 12))
    rotary: Any = per.get_encoder("rotary", dim=64)
    gen = torch.Generator().manual_seed(3)
    x, ids = torch.randn(1, 2, 1, 64, generator=gen), torch.tensor([[5], [3], [7]])
    torch.func.jacrev(lambda g: (mrope.rotate(x, ids) * g).sum(-1))(torch.ones(64))
    torch.func.jacrev(lambda g: (rotary.rotate(x * g, offset=5)).sum(-1))(torch.ones(64))
    torch.func.vmap(lambda xs: rotary.rotate(xs, offset=9))(torch.randn(3, 2, 1, 64, generator=gen))
    assert not any(torch._C._functorch.is_functorch_wrapped_tensor(t) for t in _stored_tensors())
    for enc, call in ((mrope, lambda: mrope.rotate(x, ids)), (rotary,
                      lambda: rotary.rotate(x, offset=5)), (rotary,
                      lambda: rotary.rotate(x, torch.tensor([2])))):
        torch.testing.assert_close(call(), computed(call), rtol=0, atol=0, msg=enc.name)


def test_compiled_calls_after_eager_ones_compile_once() -> None:
    """A function compiled once is not compiled again because eager calls filled the store
    (Dynamo would guard on what they changed)."""
    torch = _torch()
    from torch._dynamo.testing import CompileCounter

    enc: Any = per.get_encoder("rotary", dim=16)
    q = torch.randn(1, 4, 1, 16, generator=torch.Generator().manual_seed(4))
    counter = CompileCounter()
    f = torch.compile(lambda x, pos: enc.rotate(x, pos), backend=counter, fullgraph=True)
    for step in range(6):
        enc.rotate(q, torch.tensor([[[step]]]))
        enc.rotate(q, offset=step)
        got = f(q, torch.tensor([[[step]]]))
        want = computed(lambda step=step: enc.rotate(q, torch.tensor([[[step]]])))
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert counter.frame_count == 1


def test_jax_x64_switched_on_after_tables_were_made() -> None:
    """Tables made with JAX's x64 flag off (float32 angles) are not served once it is on: the
    result is that of a process that started with it (a fresh process each)."""
    pytest.importorskip("jax")
    if "jax" not in BACKENDS:
        pytest.skip("jax not selected by PEREGISTRY_BACKENDS")
    code = (
        "import sys, json, numpy as np, jax\n"
        "if sys.argv[1] == 'start': jax.config.update('jax_enable_x64', True)\n"
        "import jax.numpy as jnp, peregistry as per\n"
        "q = jnp.asarray(np.random.default_rng(0).standard_normal((1, 2, 3, 16)), jnp.float32)\n"
        "enc = per.get_encoder('rotary', dim=16)\n"
        "ids = jnp.asarray([[[900, 901, 902]]])\n"
        "if sys.argv[1] == 'switch':\n"
        "    enc.rotate(q, offset=900); enc.rotate(q, ids)\n"
        "    jax.config.update('jax_enable_x64', True)\n"
        "outs = [enc.rotate(q, offset=900), enc.rotate(q, ids)]\n"
        "print(json.dumps([np.asarray(o).tobytes().hex() for o in outs]))\n")
    got = []
    for mode in ("start", "switch"):
        out = subprocess.run([sys.executable, "-c", code, mode], capture_output=True,
                             text=True, check=False, timeout=600)
        assert out.returncode == 0, out.stderr
        got.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert got[0] == got[1]


def test_one_encoder_serving_two_frameworks_at_one_offset() -> None:
    """The same offset asked by NumPy and then by array-api-strict (whose dtypes warn when
    compared with NumPy's) gives each framework its own rows."""
    xps = pytest.importorskip("array_api_strict")
    enc: Any = per.get_encoder("rotary", dim=8)
    x = np.random.default_rng(4).standard_normal((1, 2, 3, 8))
    for _ in range(2):
        a = enc.rotate(x.astype(np.float32), offset=5)
        b = enc.rotate(xps.asarray(x), offset=5)  # float64: another dtype, another framework
        c = enc.rotate(x.astype(np.float32), offset=6)
        d = enc.rotate(xps.asarray(x.astype(np.float32)), offset=6)
    assert isinstance(a, np.ndarray) and isinstance(c, np.ndarray)
    assert b.dtype == xps.float64 and d.dtype == xps.float32
    np.testing.assert_array_equal(np.asarray(d), c)
    np.testing.assert_array_equal(a, computed(lambda: enc.rotate(x.astype(np.float32), offset=5)))
    np.testing.assert_array_equal(c, computed(lambda: enc.rotate(x.astype(np.float32), offset=6)))
    np.testing.assert_array_equal(np.asarray(b),
                                  np.asarray(computed(lambda: enc.rotate(xps.asarray(x), offset=5))))


# -- torch's rotation -----------------------------------------------------------------------------


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_torch_pure_path_same_bits_on_any_thread_count(threads: int, dtype: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a rotation kernel, torch rotates in cache blocks on one thread and in
    whole-tensor ops on several: both are the generic rotation
    (:func:`peregistry.rope.apply_rotation`)."""
    torch = _torch()
    from peregistry.registry import default_registry
    from peregistry.rope import _kernels
    from peregistry.rope._torch import BLOCK_ELEMENTS

    monkeypatch.setattr(_kernels, "ACTIVE", ())  # no plugin's kernel: the core's torch path
    xp = default_registry.backend("torch").namespace()
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        enc: Any = per.get_encoder("rotary", dim=64)
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(2, 4, 2 * BLOCK_ELEMENTS // (4 * 64), 64, generator=gen)
        x = x.to(getattr(torch, dtype))
        pos = torch.randint(0, 5000, (x.shape[-2],), generator=gen)
        fast = enc.rotate(x, pos)
        tables = enc.tables(pos)
        cos, sin = tables.cos.to(torch.float32), tables.sin.to(torch.float32)
        generic = apply_rotation(x, cos, sin, rotary_dim=64, interleaved=False,
                                 cdt=torch.float32, xp=xp)
    finally:
        torch.set_num_threads(before)
    assert fast.dtype == x.dtype
    assert torch.equal(fast, generic)


def test_rotation_of_views_and_broadcast_tables() -> None:
    """The torch kernel keeps a plan per layout of x and the tables: a view of the same shape
    with other strides and tables that broadcast differently must each be rotated as the
    generic rotation does, in any order."""
    torch = _torch()
    from peregistry.registry import default_registry

    xp = default_registry.backend("torch").namespace()
    g = torch.Generator().manual_seed(0)
    base = torch.randn(2, 3, 5, 8, generator=g)
    views = [base, base.transpose(1, 2).contiguous().transpose(1, 2)]  # same shape, strides differ
    tables = [(torch.randn(5, 4, generator=g),) * 2,
              (torch.randn(2, 1, 5, 4, generator=g),) * 2,
              (torch.randn(1, 3, 5, 4, generator=g), torch.randn(1, 3, 5, 4, generator=g))]
    for _ in range(2):
        for x in views:
            for cos, sin in tables:
                got = apply_rotary(x, cos, sin)
                want = apply_rotation(x, cos, sin, rotary_dim=8, interleaved=False,
                                      cdt=torch.float32, xp=xp)
                assert got.dtype == want.dtype
                torch.testing.assert_close(got, want, rtol=0, atol=0)
