"""The core's NumPy fast path of the rotation (``peregistry/rope/_numpy.py``) is the generic
rotation bit for bit: layouts, dtypes (x narrower, equal or wider than the tables), partial
rotary, broadcasting tables (including ones that enlarge ``x``'s leading axes), strided inputs,
the blocked path of large inputs, and special values (NaN, inf, -0.0, denormals)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry.rope import _delegation, _kernels
from peregistry.rope import _numpy as fast
from peregistry.rope._funcs import apply_rotation

pytestmark = pytest.mark.backend_free  # NumPy arrays only, whatever the env selects


def _same_bits(got: Any, want: Any) -> None:
    assert type(got) is np.ndarray
    assert got.shape == want.shape and got.dtype == want.dtype
    assert got.tobytes() == want.tobytes(), np.max(np.abs(got.astype(np.float64)
                                                         - want.astype(np.float64)))


def _tables(shape: tuple[int, ...], dtype: Any, seed: int) -> tuple[Any, Any]:
    angle = np.random.default_rng(seed).uniform(-100, 100, shape)
    return np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)


def _check(x: Any, cos: Any, sin: Any, rotary_dim: int, interleaved: bool) -> None:
    want = apply_rotation(x, cos, sin, rotary_dim=rotary_dim, interleaved=interleaved,
                          cdt=cos.dtype, xp=np)
    got = fast.rotate(x, cos, sin, rotary_dim=rotary_dim, interleaved=interleaved, cdt=cos.dtype)
    assert got is not None
    _same_bits(got, want)
    # and through the one dispatch, as the encoders call it
    via = _delegation.rotate(x, cos, sin, rotary_dim=rotary_dim, interleaved=interleaved,
                             cdt=cos.dtype, xp=np, native=True)
    _same_bits(via, want)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize(("xdtype", "wdtype"), [(np.float32, np.float32), (np.float64, np.float64),
                                           (np.float16, np.float32), (np.float32, np.float64),
                                           (np.float64, np.float32)])
@pytest.mark.parametrize(("x_shape", "t_shape", "rotary_dim"), [
    ((2, 3, 5, 8), (5, 4), 8),           # tables shared by batch and heads
    ((2, 3, 5, 10), (5, 3), 6),          # partial rotary: the last 4 features pass through
    ((2, 3, 5, 8), (2, 1, 5, 4), 8),     # per-batch tables
    ((3, 5, 8), (1, 4), 8),              # one row for every position
    ((5, 8), (2, 3, 5, 4), 8),           # tables enlarge x's leading axes
    ((8,), (4,), 8),                     # one vector
])
def test_equals_generic(interleaved: bool, xdtype: Any, wdtype: Any, x_shape: tuple[int, ...],
                        t_shape: tuple[int, ...], rotary_dim: int) -> None:
    x = np.random.default_rng(0).standard_normal(x_shape).astype(xdtype)
    cos, sin = _tables(t_shape, wdtype, 1)
    _check(x, cos, sin, rotary_dim, interleaved)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize(("xdtype", "wdtype"), [(np.float32, np.float32), (np.float16, np.float32),
                                           (np.float64, np.float32), (np.float64, np.float64)])
@pytest.mark.parametrize("rotary_dim", [64, 48])
def test_blocked_equals_generic(interleaved: bool, xdtype: Any, wdtype: Any,
                                rotary_dim: int) -> None:
    """Large enough for the blocked path, with blocks that cut the sequence, a last short
    block, and groups of whole sequences."""
    for shape in [(1, 3, 4 * fast.BLOCK_ELEMENTS // 64 + 7, 64), (9, 2, 1000, 64)]:
        x = np.random.default_rng(2).standard_normal(shape).astype(xdtype)
        assert x.size >= 2 * fast.BLOCK_ELEMENTS
        cos, sin = _tables((1, 1, shape[-2], rotary_dim // 2), wdtype, 3)
        _check(x, cos, sin, rotary_dim, interleaved)
        one_c, one_s = _tables((1, rotary_dim // 2), wdtype, 4)  # one row for every position
        _check(x, one_c, one_s, rotary_dim, interleaved)


@pytest.mark.parametrize("interleaved", [False, True])
def test_strided_inputs(interleaved: bool) -> None:
    base = np.random.default_rng(5).standard_normal((4, 6, 7, 16)).astype(np.float32)
    cos, sin = _tables((7, 8), np.float32, 6)
    for x in (base.transpose(1, 0, 2, 3), base[::2], base[:, ::-1], base[..., :16],
              np.broadcast_to(base[:1], base.shape), np.asfortranarray(base),
              base[..., ::-1]):  # (reversed features: a negative stride on the pair axis)
        _check(x, cos, sin, 16, interleaved)
    _check(base, cos[::-1], sin[::-1], 16, interleaved)  # reversed tables


@pytest.mark.parametrize("interleaved", [False, True])
def test_special_values(interleaved: bool) -> None:
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 1e-40,
                         3.4e38, -3.4e38, 1.0], dtype=np.float32)
    rng = np.random.default_rng(7)
    x = rng.choice(specials, size=(3, 5, 8)).astype(np.float32)
    cos, sin = _tables((5, 4), np.float32, 8)
    cos[0, 0], sin[0, 1] = -0.0, -0.0
    with np.errstate(all="ignore"):  # (inf - inf: NaN, as the generic rotation gives it)
        _check(x, cos, sin, 8, interleaved)


@pytest.mark.parametrize("interleaved", [False, True])
def test_blocked_special_values_in_x_and_tables(interleaved: bool) -> None:
    """The blocked path's passes (the half layout's swapped copy, the interleaved layout's pairs
    swapped as 64-bit integers) keep every special value's bits, in ``x`` and in the tables,
    for float32 ``x`` and for float16 ``x`` widened block by block."""
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 1e-40,
                         3.4e38, -3.4e38, 1.0], dtype=np.float32)
    rng = np.random.default_rng(13)
    x = rng.choice(specials, size=(2, 3, 2 * fast.BLOCK_ELEMENTS // 64 + 5, 64))
    assert x.dtype == np.float32 and x.size >= 2 * fast.BLOCK_ELEMENTS
    cos, sin = _tables((x.shape[-2], 32), np.float32, 14)
    cos[1, :3], sin[2, 1:4] = specials[:3], specials[2:5]  # (NaN and inf in the tables too)
    with np.errstate(all="ignore"):
        _check(x, cos, sin, 64, interleaved)
        _check(x.astype(np.float16), cos, sin, 64, interleaved)


def test_declines() -> None:
    """Anything it does not take is left to the generic rotation (which gives the result)."""
    x = np.ones((2, 4), np.float32)
    cos, sin = _tables((2, 2), np.float32, 9)
    masked = np.ma.masked_array(x)
    assert fast.rotate(masked, cos, sin, rotary_dim=4, interleaved=False, cdt=cos.dtype) is None
    assert fast.rotate(x, cos.astype(np.float64), sin, rotary_dim=4, interleaved=False,
                       cdt=cos.dtype) is None
    assert fast.rotate(x, cos, sin, rotary_dim=4, interleaved=False, cdt=np.float64) is None


def test_inputs_unchanged_and_read_only() -> None:
    x = np.random.default_rng(10).standard_normal((2, 3, 5, 8)).astype(np.float32)
    cos, sin = _tables((5, 4), np.float32, 11)
    for a in (x, cos, sin):
        a.flags.writeable = False
    before = (x.copy(), cos.copy(), sin.copy())
    fast.rotate(x, cos, sin, rotary_dim=8, interleaved=True, cdt=cos.dtype)
    for a, b in zip((x, cos, sin), before, strict=True):
        assert a.tobytes() == b.tobytes()


def test_encoder_uses_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """A rotary encoder's NumPy calls take this path and give the bits they give without it
    (rotation kernels of plugins, which come first, set aside)."""
    monkeypatch.setattr(_kernels, "ACTIVE", ())
    x = np.random.default_rng(12).standard_normal((2, 3, 9, 16)).astype(np.float32)
    calls = []
    real = fast.rotate

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    for layout in ("half", "interleaved"):
        enc = per.get_encoder("rotary", dim=16, layout=layout)
        monkeypatch.setattr(fast, "rotate", counted)
        got = enc.rotate(x, offset=3)  # type: ignore[attr-defined]
        assert calls
        monkeypatch.setattr(fast, "rotate", lambda *a, **k: None)  # the generic rotation
        _same_bits(got, enc.rotate(x, offset=3))  # type: ignore[attr-defined]
        monkeypatch.setattr(fast, "rotate", real)
        calls.clear()


@pytest.mark.parametrize("nan_table", [False, True])
def test_blocked_special_values(nan_table: bool) -> None:
    """The blocked half layout pairs halves as ``a·c + b·(-s)``: the generic ``a·c - b·s`` to the
    bit with NaN, inf, -0.0 and denormals in ``x``; a table holding a NaN takes the other form."""
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-45, -1e-45, 3.4e38,
                         1.0], dtype=np.float32)
    shape = (1, 2, 2 * fast.BLOCK_ELEMENTS // 64 + 3, 64)
    x = np.random.default_rng(13).choice(specials, size=shape).astype(np.float32)
    cos, sin = _tables((shape[-2], 32), np.float32, 14)
    cos[0, 0], sin[1, 1] = -0.0, -0.0
    if nan_table:
        sin[2, 3] = -np.nan
    with np.errstate(all="ignore"):
        _check(x, cos, sin, 64, False)
