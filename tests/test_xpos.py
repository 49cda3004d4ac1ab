"""xPos (Sun et al. 2022): an independent float64 reference of the paper's formula, the query·key
logits depending on m - n only (and not on scale_origin), the key role through every method,
rotary-embedding-torch's ``use_xpos`` when installed, errors, and the conformance suite."""

from __future__ import annotations

import math
import pickle
from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry.backends._torch import COMPILE_BACKEND_ENV
from peregistry.testing import Case, cases_for, parametrize_with_checks
from peregistry.testing._core import EPS, selected_backends

SELECTED = [b.name for b in selected_backends()]


def needs(name: str) -> Any:
    """Skip unless backend ``name`` is selected (PEREGISTRY_BACKENDS) and importable."""
    if name not in SELECTED:
        pytest.skip(f"backend {name} not selected by PEREGISTRY_BACKENDS")
    return pytest.importorskip(name, reason=f"{name} is not installed")


def _wide(backend: Any) -> str:
    return "float64" if "float64" in backend.float_dtypes() else "float32"


def _arr(backend: Any, a: Any, dtype: str | None = None) -> Any:
    target = None if dtype is None else backend.float_dtypes()[dtype]
    return backend.from_numpy(np.asarray(a), dtype=target)


# -- the paper's formula in float64, one pair at a time -------------------------------------------
def ref_scale(pos: np.ndarray, i: int, rd: int, *, role: str = "query", scale_base: float = 512.0,
              gamma: float = 0.4, origin: float = 0.0) -> np.ndarray:
    """ζ_i^(±(p - o)/B), ζ_i = (2i/d + γ)/(1 + γ) (Sun et al. 2022, §3)."""
    zeta = (2.0 * i / rd + gamma) / (1.0 + gamma)
    sign = 1.0 if role == "query" else -1.0
    return np.power(zeta, sign * (np.asarray(pos, dtype=np.float64) - origin) / scale_base)


def ref_xpos(x: np.ndarray, pos: np.ndarray, *, role: str = "query", theta: float = 10000.0,
             rd: int | None = None, interleaved: bool = True, scale_base: float = 512.0,
             gamma: float = 0.4, origin: float = 0.0, unscaled: bool = False) -> np.ndarray:
    """Pair ``i`` (``(2i, 2i+1)`` or ``(i, i + rd/2)``) rotated by ``p·θ^(-2i/rd)`` and scaled by
    :func:`ref_scale` (not scaled with ``unscaled=True``: plain RoPE)."""
    x = np.asarray(x, dtype=np.float64)
    rd = x.shape[-1] if rd is None else rd
    pos = np.broadcast_to(np.asarray(pos, dtype=np.float64), x.shape[:-1])
    out = x.copy()
    for i in range(rd // 2):
        ia, ib = (2 * i, 2 * i + 1) if interleaved else (i, i + rd // 2)
        ang = pos * theta ** (-2.0 * i / rd)
        s = 1.0 if unscaled else ref_scale(pos, i, rd, role=role, scale_base=scale_base,
                                           gamma=gamma, origin=origin)
        a, b = x[..., ia], x[..., ib]
        out[..., ia] = s * (a * np.cos(ang) - b * np.sin(ang))
        out[..., ib] = s * (a * np.sin(ang) + b * np.cos(ang))
    return out


def _feature_scale(shape: tuple[int, ...], pos: np.ndarray, *, role: str, rd: int | None,
                   interleaved: bool, origin: float, scale_base: float, gamma: float,
                   theta: float) -> np.ndarray:
    """The reference scale of every feature of ``x`` (1 past ``rotary_dim``)."""
    rd = shape[-1] if rd is None else rd
    pos = np.broadcast_to(np.asarray(pos, dtype=np.float64), shape[:-1])
    out = np.ones(shape)
    for i in range(rd // 2):
        s = ref_scale(pos, i, rd, role=role, scale_base=scale_base, gamma=gamma, origin=origin)
        for j in ((2 * i, 2 * i + 1) if interleaved else (i, i + rd // 2)):
            out[..., j] = s
    return out


def _ref_kwargs(options: dict[str, Any]) -> dict[str, Any]:
    return {"theta": options.get("theta", 1e4), "rd": options.get("rotary_dim"),
            "interleaved": options.get("layout", "interleaved") == "interleaved",
            "scale_base": options.get("scale_base", 512.0), "gamma": options.get("gamma", 0.4),
            "origin": options.get("scale_origin", 0.0)}


OPTIONS = [
    {"dim": 16},
    {"dim": 16, "layout": "half"},
    {"dim": 24, "rotary_dim": 8, "scale_origin": 1500.0},
    {"dim": 16, "layout": "half", "theta": 500000.0, "scale_base": 128.0, "gamma": 0.9},
]


def _ids(o: dict[str, Any]) -> str:
    return "-".join(f"{k}{v}" for k, v in o.items())


@pytest.mark.parametrize("role", ["query", "key"])
@pytest.mark.parametrize("options", OPTIONS, ids=_ids)
def test_matches_paper_formula(backend: Any, options: dict[str, Any], role: str) -> None:
    enc = per.get_encoder("xpos", **options)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, options["dim"]))
    pos = rng.integers(0, 3000, size=(2, 1, 5))
    name = _wide(backend)
    got = backend.to_numpy(enc.rotate(_arr(backend, x, name), _arr(backend, pos),  # type: ignore[attr-defined]
                                      role=role))
    kw = _ref_kwargs(options)
    want = ref_xpos(x, pos, role=role, **kw)
    # Divided by the reference scale, both are RoPE: the scales span orders of magnitude.
    err = np.abs(got / _feature_scale(x.shape, pos, role=role, **kw)
                 - ref_xpos(x, pos, unscaled=True, **kw)).max()
    # float32-only backends: ~1e-6 rad from the angles, and exp(y) of |y| <= 15 adds ~16 ulps.
    tol = 64 * EPS[name] * np.abs(x).max() + (8e-6 if name == "float32" else 0.0)
    assert err <= tol, (f"xpos {role} differs from the paper's formula by {err:.3g} (relative "
                        f"to the scale), tolerance {tol:.3g}")
    assert got.shape == want.shape


def _closed_form_dot(q: np.ndarray, k: np.ndarray, delta: float, *, interleaved: bool,
                     scale_base: float = 512.0, gamma: float = 0.4) -> float:
    """<R(m)ζ^(m/B) q, R(n)ζ^(-n/B) k> = Σ_i ζ_i^(δ/B) [(q_a k_a + q_b k_b) cos δω_i +
    (q_a k_b - q_b k_a) sin δω_i], δ = m - n."""
    d = q.shape[-1]
    total = 0.0
    for i in range(d // 2):
        ia, ib = (2 * i, 2 * i + 1) if interleaved else (i, i + d // 2)
        w = 10000.0 ** (-2.0 * i / d)
        z = ((2.0 * i / d + gamma) / (1.0 + gamma)) ** (delta / scale_base)
        total += z * ((q[ia] * k[ia] + q[ib] * k[ib]) * math.cos(delta * w)
                      + (q[ia] * k[ib] - q[ib] * k[ia]) * math.sin(delta * w))
    return total


@pytest.mark.parametrize("layout", ["interleaved", "half"])
def test_logits_depend_on_m_minus_n_only_whatever_the_origin(backend: Any, layout: str) -> None:
    """<rotate_queries(q, m), rotate_keys(k, n)> is the closed form of m - n, the same for every
    scale_origin (it cancels): the property xPos is built on."""
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal(16), rng.standard_normal(16)
    name = _wide(backend)
    m0 = rng.integers(0, 2500, size=12)
    for origin in (0.0, 1000.5, -300.0):
        enc = per.get_encoder("xpos", dim=16, layout=layout, scale_origin=origin)
        for delta in (0, 1, 7, -40, 513):
            m = np.concatenate([m0 + max(delta, 0), [max(delta, 0)]])
            n = m - delta
            rq = backend.to_numpy(enc.rotate_queries(  # type: ignore[attr-defined]
                _arr(backend, np.tile(q, (m.size, 1)), name), _arr(backend, m)))
            rk = backend.to_numpy(enc.rotate_keys(  # type: ignore[attr-defined]
                _arr(backend, np.tile(k, (n.size, 1)), name), _arr(backend, n)))
            dots = np.sum(rq * rk, axis=-1)
            want = _closed_form_dot(q, k, float(delta), interleaved=layout == "interleaved")
            # each factor ζ^(±(p - o)/B) is off by ~|y|·eps relative (|y| <= 10 here)
            big = np.abs(rq).max() * np.abs(rk).max() * q.size
            tol = 256 * EPS[name] * max(abs(want), 1.0) + 64 * EPS[name] * big
            assert np.abs(dots - want).max() <= tol, (origin, delta, dots, want)


def test_query_role_on_keys_is_not_relative(backend: Any) -> None:
    """Plain RoPE code (rotate for both) gives ζ^((m + n)/B): not relative, the documented pitfall."""
    enc = per.get_encoder("xpos", dim=8)
    name = _wide(backend)
    x = np.ones((2, 8))
    a = backend.to_numpy(enc.rotate(_arr(backend, x, name), _arr(backend, [0, 0])))  # type: ignore[attr-defined]
    b = backend.to_numpy(enc.rotate(_arr(backend, x, name), _arr(backend, [1000, 1000])))  # type: ignore[attr-defined]
    assert abs(np.sum(a[0] * a[1]) - np.sum(b[0] * b[1])) > 1.0


def test_cos_sin_tables_and_aliases_per_role(backend: Any) -> None:
    enc = per.get_encoder("xpos", dim=8, scale_origin=10.0)
    name = _wide(backend)
    dt = backend.float_dtypes()[name]
    pos = np.array([0, 3, 700, 2900])
    x = np.random.default_rng(2).standard_normal((2, 4, 8))
    xb, pb = _arr(backend, x, name), _arr(backend, pos)
    for role in ("query", "key"):
        cos, sin = (backend.to_numpy(t) for t in enc.cos_sin(pb, dtype=dt, role=role))  # type: ignore[attr-defined]
        s = np.stack([ref_scale(pos, i, 8, role=role, origin=10.0) for i in range(4)], axis=-1)
        ang = pos[:, None] * 10000.0 ** (-2.0 * np.arange(4) / 8)
        want_c, want_s = np.repeat(np.cos(ang) * s, 2, axis=-1), np.repeat(np.sin(ang) * s, 2, axis=-1)
        tol = 64 * EPS[name] * np.abs(want_c).max() + (8e-6 if name == "float32" else 0)
        np.testing.assert_allclose(cos, want_c, rtol=64 * EPS[name], atol=tol)
        np.testing.assert_allclose(sin, want_s, rtol=64 * EPS[name], atol=tol)
        via_tables = backend.to_numpy(enc.tables(pb, role=role).rotate(xb))  # type: ignore[attr-defined]
        direct = backend.to_numpy(enc.rotate(xb, pb, role=role))  # type: ignore[attr-defined]
        np.testing.assert_array_equal(via_tables, direct)
    np.testing.assert_array_equal(backend.to_numpy(enc.rotate_keys(xb, pb)),  # type: ignore[attr-defined]
                                  backend.to_numpy(enc.rotate(xb, pb, role="key")))  # type: ignore[attr-defined]
    np.testing.assert_array_equal(backend.to_numpy(enc.rotate_queries(xb, pb)),  # type: ignore[attr-defined]
                                  backend.to_numpy(enc.rotate(xb, pb)))  # type: ignore[attr-defined]


def test_key_role_offset_equals_explicit_positions(backend: Any) -> None:
    """Decoding: keys at offset o are the keys at o + arange(seq) (the conformance suite checks
    the query role), also for an array offset per batch row."""
    enc = per.get_encoder("xpos", dim=8)
    name = _wide(backend)
    x = np.random.default_rng(3).standard_normal((3, 4, 8))
    xb = _arr(backend, x, name)
    for o in (0, 17, 4000):
        a = backend.to_numpy(enc.rotate_keys(xb, offset=o))  # type: ignore[attr-defined]
        b = backend.to_numpy(enc.rotate_keys(xb, _arr(backend, o + np.arange(4))))  # type: ignore[attr-defined]
        np.testing.assert_array_equal(a, b)
    off = np.array([[0], [5], [900]])
    got = backend.to_numpy(enc.rotate_keys(xb, offset=_arr(backend, off)))  # type: ignore[attr-defined]
    want = ref_xpos(x, off + np.arange(4), role="key")
    np.testing.assert_allclose(got, want, rtol=64 * EPS[name] + (8e-6 if name == "float32" else 0),
                               atol=1e-12)


def test_key_role_under_jit(backend: Any) -> None:
    enc = per.get_encoder("xpos", dim=8)
    fn = backend.jit(lambda x, p: enc.rotate_keys(x, p) + enc.rotate_queries(x, offset=3))  # type: ignore[attr-defined]
    if fn is None:
        pytest.skip(f"{backend.name} has no compiler")
    x = _arr(backend, np.random.default_rng(4).standard_normal((2, 5, 8)), "float32")
    p = _arr(backend, np.array([1, 9, 50, 700, 2000]))
    got, want = backend.to_numpy(fn(x, p)), backend.to_numpy(
        enc.rotate_keys(x, p) + enc.rotate_queries(x, offset=3))  # type: ignore[attr-defined]
    np.testing.assert_allclose(got, want, rtol=16 * EPS["float32"], atol=16 * EPS["float32"])


def test_identity_pickle_and_replace() -> None:
    enc = per.get_encoder("xpos", dim=8, scale_base=256)
    assert enc == per.get_encoder("xpos", dim=8, scale_base=256.0)
    assert hash(enc) == hash(per.get_encoder("xpos", dim=8, scale_base=256.0))
    assert enc != enc.replace(scale_origin=1.0)
    assert enc.options["layout"] == "interleaved" and enc.options["gamma"] == 0.4
    back = pickle.loads(pickle.dumps(enc))
    x = np.random.default_rng(5).standard_normal((4, 8))
    np.testing.assert_array_equal(back.rotate_keys(x), enc.rotate_keys(x))  # type: ignore[attr-defined]
    np.testing.assert_allclose(enc.zeta(), [(2 * i / 8 + 0.4) / 1.4 for i in range(4)],  # type: ignore[attr-defined]
                               rtol=1e-15)


@pytest.mark.parametrize(("options", "exc", "pattern"), [
    ({"dim": 16, "scale_base": 0}, ValueError, "option 'scale_base' must be a finite number > 0, got 0"),
    ({"dim": 16, "scale_base": math.inf}, ValueError, "option 'scale_base' must be a finite number > 0"),
    ({"dim": 16, "gamma": 0.0}, ValueError, "option 'gamma' must be a finite number > 0, got 0.0"),
    ({"dim": 16, "scale_origin": math.nan}, ValueError, "option 'scale_origin' must be a finite number"),
    ({"dim": 16, "scale_origin": "middle"}, TypeError, "option 'scale_origin' must be a finite number"),
    ({"dim": 16, "rotary_dim": 32}, ValueError,
     "option 'rotary_dim' must be None (= dim) or a positive even integer <= dim (16), got 32"),
    ({"dim": 16, "layout": "neox"}, ValueError,
     "option 'layout' must be one of 'half', 'interleaved', got 'neox'"),
])
def test_bad_options(options: dict[str, Any], exc: type[Exception], pattern: str) -> None:
    with pytest.raises(exc) as info:
        per.get_encoder("xpos", **options)
    assert pattern in str(info.value)
    assert str(info.value).startswith("xpos: ")


def test_bad_role() -> None:
    enc = per.get_encoder("xpos", dim=8)
    x = np.zeros((2, 8))
    for call in (lambda: enc.rotate(x, role="value"),  # type: ignore[attr-defined]
                 lambda: enc.cos_sin(np.arange(2), role="value"),  # type: ignore[attr-defined]
                 lambda: enc.tables(np.arange(2), role="value")):  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match="xpos: role must be 'query' or 'key', got 'value'"):
            call()


def test_bench_hand_written_xpos_is_the_same_encoder() -> None:
    """`peregistry bench` times xpos against hand_xpos: they must compute the same thing."""
    from peregistry.bench._hand import hand_xpos

    x = np.random.default_rng(6).standard_normal((1, 2, 64, 16)).astype(np.float32)
    got = per.get_encoder("xpos", dim=16).rotate(x)  # type: ignore[attr-defined]
    np.testing.assert_allclose(hand_xpos(np, x), got, rtol=1e-5, atol=1e-5)


# -- rotary-embedding-torch (lucidrains), use_xpos=True ---------------------------------------------
def _ret() -> Any:
    needs("torch")
    return pytest.importorskip("rotary_embedding_torch",
                               reason="rotary-embedding-torch is not installed")


def _ret_float64(ret: Any, rd: int) -> Any:
    """rotary-embedding-torch's xPos module built in float64: its frequency formula in float64,
    and its scale buffer ``(arange + 0.4·d)/(1.4·d)`` made under float64 default dtype."""
    import torch

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        freqs = 1.0 / (10000.0 ** (torch.arange(0, rd, 2, dtype=torch.float64) / rd))
        return ret.RotaryEmbedding(dim=rd, custom_freqs=freqs, use_xpos=True,
                                   cache_if_possible=False)
    finally:
        torch.set_default_dtype(old)


@pytest.mark.parametrize(("seq", "rd", "head_dim"), [(16, 8, 8), (37, 16, 24), (600, 32, 32)])
def test_matches_rotary_embedding_torch_in_float64(seq: int, rd: int, head_dim: int) -> None:
    """rotary-embedding-torch's rotate_queries_and_keys centers the scale on the sequence
    (power (t - seq//2)/scale_base): xpos with scale_origin=seq//2 gives its q and k, and with the
    default origin its logits. Built in float64 (its frequency formula, in float64) so that
    the comparison is to rounding."""
    ret = _ret()  # skips unless torch is selected and rotary-embedding-torch installed
    import torch

    ref = _ret_float64(ret, rd)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, seq, head_dim, dtype=torch.float64, generator=g)
    k = torch.randn(2, 3, seq, head_dim, dtype=torch.float64, generator=g)
    rq, rk = ref.rotate_queries_and_keys(q, k)
    enc = per.get_encoder("xpos", dim=head_dim, rotary_dim=rd, scale_origin=seq // 2)
    oq, ok = enc.rotate_queries(q), enc.rotate_keys(k)  # type: ignore[attr-defined]
    tol = 64 * EPS["float64"] * seq
    torch.testing.assert_close(oq, rq, rtol=tol, atol=tol * float(rq.abs().max()))
    torch.testing.assert_close(ok, rk, rtol=tol, atol=tol * float(rk.abs().max()))
    enc0 = enc.replace(scale_origin=0.0)
    logits = enc0.rotate_queries(q) @ enc0.rotate_keys(k).transpose(-1, -2)  # type: ignore[attr-defined]
    want = rq @ rk.transpose(-1, -2)
    torch.testing.assert_close(logits, want, rtol=tol, atol=tol * float(want.abs().max()))


def test_matches_rotary_embedding_torch_as_shipped_float32() -> None:
    """Its default module (float32 frequencies and angles, the cache on) on float32 inputs."""
    ret = _ret()  # skips unless torch is selected and rotary-embedding-torch installed
    import torch

    seq, dim = 128, 64
    ref = ret.RotaryEmbedding(dim=dim, use_xpos=True)
    g = torch.Generator().manual_seed(1)
    q, k = (torch.randn(1, 4, seq, dim, generator=g) for _ in range(2))
    rq, rk = ref.rotate_queries_and_keys(q, k)
    enc = per.get_encoder("xpos", dim=dim, scale_origin=seq // 2)
    # its float32 angles p·ω drift by ~p·ulp: 1e-5 at p = 128
    torch.testing.assert_close(enc.rotate_queries(q), rq, rtol=2e-5, atol=2e-5)  # type: ignore[attr-defined]
    torch.testing.assert_close(enc.rotate_keys(k), rk, rtol=2e-5, atol=2e-5)  # type: ignore[attr-defined]


def test_rotary_embedding_torch_cached_keys_centers_q_and_k_apart() -> None:
    """Its rotate_queries_with_cached_keys centers the queries' scale on q_len//2 and the keys'
    on k_len//2 (two origins), so its logits carry an extra ζ^((k_len//2 - q_len//2)/B) and
    differ from rotate_queries_and_keys's: xpos reproduces them only with two encoders, and
    one scale_origin gives the relative logits (docs/rotary.md)."""
    ret = _ret()  # skips unless torch is selected and rotary-embedding-torch installed
    import torch

    rd = 16
    ref = _ret_float64(ret, rd)
    g = torch.Generator().manual_seed(2)
    q = torch.randn(1, 2, 4, rd, dtype=torch.float64, generator=g)
    k = torch.randn(1, 2, 64, rd, dtype=torch.float64, generator=g)
    rq, rk = ref.rotate_queries_with_cached_keys(q, k)
    theirs = rq @ rk.transpose(-1, -2)
    enc = per.get_encoder("xpos", dim=rd)
    two = (enc.replace(scale_origin=2.0).rotate_queries(q, offset=60)  # type: ignore[attr-defined]
           @ enc.replace(scale_origin=32.0).rotate_keys(k).transpose(-1, -2))  # type: ignore[attr-defined]
    tol = 1e-12 * float(theirs.abs().max())
    torch.testing.assert_close(two, theirs, rtol=1e-12, atol=tol)
    ours = enc.rotate_queries(q, offset=60) @ enc.rotate_keys(k).transpose(-1, -2)  # type: ignore[attr-defined]
    assert float((ours - theirs).abs().max()) > 1e-3 * float(ours.abs().max())


# -- the conformance suite ------------------------------------------------------------------------
@parametrize_with_checks([
    ("xpos", {"dim": 16}),
    ("xpos", {"dim": 24, "rotary_dim": 16, "layout": "half", "scale_origin": 100.0}),
])
def test_conformance(case: Case) -> None:
    case.run()


def _inductor_cases() -> list[Any]:
    if "torch" not in SELECTED:
        return []
    return [pytest.param(c, id=c.id) for c in cases_for(
        [("xpos", {"dim": 64})], backends="torch",
        checks=["check_jit", "check_rotary_jit_traces_once"])]


@pytest.mark.parametrize("case", _inductor_cases())
def test_torch_compile_with_inductor(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scale lives in the tables, which inductor compiles like rotary's."""
    monkeypatch.setenv(COMPILE_BACKEND_ENV, "inductor")
    case.run()
