"""FoPE (Hua et al. 2024) against vLLM's ``FourierRotaryEmbedding`` written out independently in
float64 NumPy (``vllm/model_executor/layers/rotary_embedding/fope.py``: ``_compute_inv_freq``,
``_compute_cos_sin_cache``, ``forward_native``) on every selected backend and dtype, per-KV-head
coefficients with grouped queries, the tables, offsets and layouts with params, training steps,
init, errors, and the conformance suite with two KV heads."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry.testing import Case, check_encoder, parametrize_with_checks
from peregistry.testing._core import EPS

A = np.ndarray[Any, Any]


# -- vLLM's fope.py, line by line, in float64 ------------------------------------------------------
def vllm_inv_freq(rotary_dim: int, base: float, max_position_embeddings: int,
                  num_inv_freq: int | None) -> A:
    """``_compute_inv_freq``: RoFormer's frequencies, those with a period shorter than the
    training length kept (or the first ``num_inv_freq``)."""
    inv_freq = 1.0 / (base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim))
    selected = np.ones_like(inv_freq, dtype=bool)
    if num_inv_freq is not None:
        selected[num_inv_freq:] = False
    else:
        selected = inv_freq > (2.0 * np.pi / max_position_embeddings)
    return inv_freq[selected]


def vllm_cache_rows(t: A, inv_freq: A, cos_coef: A, sin_coef: A, head_size: int,
                    sep_head: bool, sin_pad: float = 0.0) -> tuple[A, A]:
    """Rows ``t`` of ``_compute_cos_sin_cache``: ``(len(t), [kv,] head_size)`` cos and sin.
    vLLM's shared coefficients are ``coef[0]`` of a ``(kv, D, D)`` parameter; ours are that
    ``(D, D)`` matrix. The clipped pairs' sin is ``sin_pad``: 0 in vLLM, 1 in SGLang's
    ``rope_variant.py`` and the paper's code (tests/test_engine_fope.py)."""
    freqs = np.einsum("j,i -> ji", np.asarray(t, dtype=np.float64), inv_freq)
    if sep_head:
        heads = cos_coef.shape[0]
        pos_cos = np.broadcast_to(np.cos(freqs)[None], (heads, *freqs.shape))
        pos_sin = np.broadcast_to(np.sin(freqs)[None], (heads, *freqs.shape))
        sin = np.einsum("htD, hDd -> thd", pos_sin, sin_coef)
        cos = np.einsum("htD, hDd -> thd", pos_cos, cos_coef)
    else:
        sin = np.einsum("tD, Dd -> td", np.sin(freqs), sin_coef)
        cos = np.einsum("tD, Dd -> td", np.cos(freqs), cos_coef)
    pad = [(0, 0)] * (sin.ndim - 1) + [(0, head_size // 2 - sin.shape[-1])]
    sin = np.pad(sin, pad, mode="constant", constant_values=sin_pad)  # the clipped pairs
    cos = np.pad(cos, pad, mode="constant", constant_values=1.0)  # and cos 1
    return np.concatenate((cos, cos), axis=-1), np.concatenate((sin, sin), axis=-1)


def vllm_forward(query: A, cos: A, sin: A, head_size: int) -> A:
    """``forward_native`` on ``query`` ``(tokens, heads·head_size)`` with the cache rows of its
    tokens: per-KV-head rows flattened, the queries viewed as ``(tokens·kv, heads/kv, size)``."""
    query = query.reshape(query.shape[0], -1, head_size)
    query_shape = query.shape
    if cos.ndim == 3:
        cos, sin = cos.reshape(-1, cos.shape[-1]), sin.reshape(-1, sin.shape[-1])
        query = query.reshape(cos.shape[0], -1, query.shape[-1])
    cos, sin = cos[:, None], sin[:, None]
    x1, x2 = query[..., : head_size // 2], query[..., head_size // 2:]
    rotated = np.concatenate((-x2, x1), axis=-1)  # rotate_neox
    return (query * cos + rotated * sin).reshape(query_shape)


def reference(enc: Any, x: A, positions: A, params: dict[str, A]) -> A:
    """vLLM's result for our ``x`` ``(heads, seq, dim)`` at ``positions`` ``(seq,)``."""
    o = enc.options
    inv = vllm_inv_freq(o["dim"], o["theta"], o["max_position_embeddings"], o["num_inv_freq"])
    cos, sin = vllm_cache_rows(positions, inv, params["cos_coef"], params["sin_coef"], o["dim"],
                               o["sep_head"])
    heads, seq, dim = x.shape
    query = np.transpose(x, (1, 0, 2)).reshape(seq, heads * dim)
    return np.transpose(vllm_forward(query, cos, sin, dim), (1, 0, 2))


# -- helpers ----------------------------------------------------------------------------------------
def _wide(backend: Any) -> str:
    return "float64" if "float64" in backend.float_dtypes() else "float32"


def _draw(enc: Any, rng: np.random.Generator) -> dict[str, A]:
    """Coefficients far from the identity: every frequency feeds every pair."""
    eye = np.eye(enc.num_frequencies)
    return {k: eye + 0.5 * rng.standard_normal(s) for k, s in enc.param_shapes().items()}


def _tolerance(enc: Any, name: str, wide: str, x: A, params: dict[str, A], reach: float) -> float:
    """Roundings of the rotation computed in ``name`` (a few per term of ``x·C + rot(x)·S``,
    ``|C|, |S| <= colsum``) plus the tables' error in ``wide``: each of the ``D`` terms
    ``coef·cos(p·ω)`` is off by ``(|p| + 4)·eps`` and their sum by ``D·eps`` more, times
    ``|x|``."""
    colsum = max(float(np.abs(v).sum(axis=-2).max()) for v in params.values())
    scale = float(np.abs(x).max()) * 2.0 * colsum
    d = enc.num_frequencies
    return 8 * EPS[name] * scale + 4 * EPS[wide] * scale * (reach + d + 4)


CONFIGS = [
    pytest.param({"dim": 16, "max_position_embeddings": 64}, 3, id="clip-L64"),
    pytest.param({"dim": 32, "max_position_embeddings": 256, "theta": 5e6}, 2,
                 id="clip-theta5e6"),
    pytest.param({"dim": 16, "max_position_embeddings": 64, "num_inv_freq": 8}, 1,
                 id="num_inv_freq-all"),
    pytest.param({"dim": 16, "max_position_embeddings": 64, "sep_head": True,
                  "num_kv_heads": 2}, 4, id="sep-head-gqa"),
    pytest.param({"dim": 24, "max_position_embeddings": 100, "num_inv_freq": 5, "sep_head": True,
                  "num_kv_heads": 3, "init_factor": 0.5}, 3, id="sep-head-n5"),
]


@pytest.mark.parametrize(("options", "heads"), CONFIGS)
def test_matches_vllm(backend: Any, options: dict[str, Any], heads: int) -> None:
    """Every float dtype of ``x`` (params in the widest), positions past the training length."""
    enc = per.get_encoder("fope", **options)
    rng = np.random.default_rng(0)
    wide = _wide(backend)
    wdt = backend.float_dtypes()[wide]
    params = {k: backend.from_numpy(v, dtype=wdt) for k, v in _draw(enc, rng).items()}
    params_np = {k: np.asarray(backend.to_numpy(v), dtype=np.float64) for k, v in params.items()}
    pos = rng.integers(0, 3 * options["max_position_embeddings"], size=9)
    x = rng.standard_normal((heads, 9, options["dim"]))
    for name, dt in backend.float_dtypes().items():
        xb = backend.from_numpy(x, dtype=dt)
        got = backend.to_numpy(enc.rotate(xb, backend.from_numpy(pos), params=params))
        assert got.dtype == np.asarray(backend.to_numpy(xb)).dtype or name == "bfloat16"
        x_in = np.asarray(backend.to_numpy(xb), dtype=np.float64)  # x as the dtype holds it
        want = reference(enc, x_in, pos, params_np)
        # per element: the rotation's roundings in its compute dtype (float32 for narrower
        # ones) and the tables', then half an ulp of `name` at that value (one cast)
        compute = name if name in ("float32", "float64") else "float32"
        tol = (_tolerance(enc, compute, wide, x_in, params_np, float(pos.max()))
               + EPS[name] / 2 * np.abs(want))
        err = np.abs(np.asarray(got, dtype=np.float64) - want)
        assert np.all(err <= tol), (f"{backend.name} {name}: error {float(err.max()):.3g}, "
                                    f"{int(np.sum(err > tol))} elements past their bound")


@pytest.mark.parametrize(("options", "heads"), CONFIGS)
def test_cos_sin_are_vllms_cache_rows(backend: Any, options: dict[str, Any], heads: int) -> None:
    """``cos_sin(p, params=...)`` are the rows ``p`` of vLLM's ``cos_sin_cache`` (per-KV-head
    tables with the head axis before the sequence axis), of the params' dtype."""
    enc = per.get_encoder("fope", **options)
    rng = np.random.default_rng(1)
    wide = _wide(backend)
    params = {k: backend.from_numpy(v, dtype=backend.float_dtypes()[wide])
              for k, v in _draw(enc, rng).items()}
    params_np = {k: np.asarray(backend.to_numpy(v), dtype=np.float64) for k, v in params.items()}
    pos = rng.integers(0, 1000, size=6)
    cos, sin = enc.cos_sin(backend.from_numpy(pos), params=params)
    assert cos.dtype == params["cos_coef"].dtype
    o = enc.options
    inv = vllm_inv_freq(o["dim"], o["theta"], o["max_position_embeddings"], o["num_inv_freq"])
    want = vllm_cache_rows(pos, inv, params_np["cos_coef"], params_np["sin_coef"], o["dim"],
                           o["sep_head"])
    for got, ref in zip((cos, sin), want, strict=True):
        ref = np.moveaxis(ref, 1, 0) if o["sep_head"] else ref  # (t, kv, d) -> (kv, t, d)
        tol = _tolerance(enc, wide, wide, np.ones(1), params_np, float(pos.max()))
        np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0, atol=tol)


def test_float32_tables_far_from_the_origin(backend: Any) -> None:
    """Positions near 2**20 (and 987 654): float32 tables within 1e-5 of the float64 formula on
    every backend (exact angle reduction where float64 is missing)."""
    enc = per.get_encoder("fope", dim=16, max_position_embeddings=4096)
    params = {k: backend.from_numpy(v, dtype=backend.float_dtypes()["float32"])
              for k, v in enc.init(np, seed=5).items()}
    params_np = {k: np.asarray(backend.to_numpy(v), dtype=np.float64) for k, v in params.items()}
    pos = np.asarray([2**20 - 7, 2**20, 2**20 + 3, 987_654])
    cos, sin = enc.cos_sin(backend.from_numpy(pos), params=params)
    o = enc.options
    inv = vllm_inv_freq(16, o["theta"], 4096, None)
    want = vllm_cache_rows(pos, inv, params_np["cos_coef"], params_np["sin_coef"], 16, False)
    colsum = max(float(np.abs(v).sum(axis=0).max()) for v in params_np.values())
    for got, ref in zip((cos, sin), want, strict=True):
        np.testing.assert_allclose(backend.to_numpy(got), ref, rtol=0, atol=1e-5 * colsum)


# -- the tables, offsets, layouts and fast paths with params ------------------------------------------
def _learned(backend: Any, **options: Any) -> tuple[Any, dict[str, Any]]:
    enc = per.get_encoder("fope", **options)
    rng = np.random.default_rng(2)
    dt = backend.float_dtypes()[_wide(backend)]
    return enc, {k: backend.from_numpy(v, dtype=dt) for k, v in _draw(enc, rng).items()}


@pytest.mark.parametrize("options", [{}, {"sep_head": True, "num_kv_heads": 2}])
def test_rotate_is_x_cos_plus_rotated_sin(backend: Any, options: dict[str, Any]) -> None:
    """``rotate(q, p)`` = ``q·cos + rotate_half(q)·sin`` with ``cos_sin(p)``; query head ``i`` of
    ``H = 4`` uses KV head ``i // 2``; ``tables(p, heads=4)`` rotates the same, bit for bit."""
    enc, params = _learned(backend, dim=16, max_position_embeddings=64, **options)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 7, 16))
    pos = rng.integers(0, 500, size=7)
    dt = params["cos_coef"].dtype
    xb, pb = backend.from_numpy(x, dtype=dt), backend.from_numpy(pos)
    got = backend.to_numpy(enc.rotate(xb, pb, params=params))
    c, s = (np.asarray(backend.to_numpy(t), dtype=np.float64)
            for t in enc.cos_sin(pb, params=params))
    if options:
        c, s = np.repeat(c, 2, axis=0), np.repeat(s, 2, axis=0)  # (kv, 7, 16) -> (4, 7, 16)
    want = x * c + np.concatenate((-x[..., 8:], x[..., :8]), axis=-1) * s
    wide = _wide(backend)
    np.testing.assert_allclose(got, want, rtol=0, atol=64 * EPS[wide] * float(np.abs(want).max()))
    tables = enc.tables(pb, params=params, heads=4 if options else None)
    np.testing.assert_array_equal(backend.to_numpy(tables.rotate(xb)), got)


def test_grouped_heads_of_a_strided_view_eager_and_compiled(backend: Any) -> None:
    """Queries as a projection leaves them, ``(batch, seq, heads, dim)`` seen as ``(batch,
    heads, seq, dim)`` (not contiguous): 8 heads over 2 KV heads, eagerly and under the
    backend's compiler, as vLLM computes them."""
    enc, params = _learned(backend, dim=16, max_position_embeddings=64, sep_head=True,
                           num_kv_heads=2)
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 7, 8, 16))
    pos = rng.integers(0, 400, size=7)
    xb = backend.namespace().permute_dims(backend.from_numpy(x, dtype=params["cos_coef"].dtype),
                                          (0, 2, 1, 3))
    pb = backend.from_numpy(pos)
    params_np = {k: np.asarray(backend.to_numpy(v), dtype=np.float64) for k, v in params.items()}
    want = np.stack([reference(enc, np.transpose(x[i], (1, 0, 2)), pos, params_np)
                     for i in range(2)])
    wide = _wide(backend)
    tol = _tolerance(enc, wide, wide, x, params_np, float(pos.max()))
    np.testing.assert_allclose(backend.to_numpy(enc.rotate(xb, pb, params=params)), want,
                               rtol=0, atol=tol)
    compiled = backend.jit(lambda v, p, c, s: enc.rotate(v, p, params={"cos_coef": c,
                                                                       "sin_coef": s}))
    if compiled is not None:
        got = compiled(xb, pb, params["cos_coef"], params["sin_coef"])
        np.testing.assert_allclose(backend.to_numpy(got), want, rtol=0, atol=tol)


def test_offset_and_positions_agree(backend: Any) -> None:
    """``positions=None, offset=o`` (rows of the table of positions) equals the explicit
    positions ``o + arange(seq)``, a decode step included; per-batch positions broadcast."""
    enc, params = _learned(backend, dim=16, max_position_embeddings=64, sep_head=True,
                           num_kv_heads=2)
    rng = np.random.default_rng(4)
    dt = params["cos_coef"].dtype
    wide = _wide(backend)
    for seq, o in ((5, 0), (5, 1000), (1, 4095)):
        xb = backend.from_numpy(rng.standard_normal((3, 4, seq, 16)), dtype=dt)
        a = backend.to_numpy(enc.rotate(xb, offset=o, params=params))
        b = backend.to_numpy(enc.rotate(xb, backend.from_numpy(o + np.arange(seq)),
                                        params=params))
        np.testing.assert_allclose(a, b, rtol=0, atol=4 * EPS[wide] * float(np.abs(b).max()))
    pos = rng.integers(0, 300, size=(3, 1, 5))  # per batch, shared by the heads
    xb = backend.from_numpy(rng.standard_normal((3, 4, 5, 16)), dtype=dt)
    whole = backend.to_numpy(enc.rotate(xb, backend.from_numpy(pos), params=params))
    for i in range(3):
        one = enc.rotate(xb[i, ...], backend.from_numpy(pos[i, 0]), params=params)
        np.testing.assert_allclose(whole[i], backend.to_numpy(one), rtol=0,
                                   atol=4 * EPS[wide] * float(np.abs(whole).max()))


def test_layouts_are_one_rotation_up_to_a_permutation(backend: Any) -> None:
    half, params = _learned(backend, dim=16, max_position_embeddings=64)
    inter = half.replace(layout="interleaved")
    perm = np.empty(16, dtype=np.int64)
    perm[0::2], perm[1::2] = np.arange(8), np.arange(8) + 8
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 16))
    dt = params["cos_coef"].dtype
    pb = backend.from_numpy(rng.integers(0, 200, size=6))
    a = backend.to_numpy(inter.rotate(backend.from_numpy(x[..., perm], dtype=dt), pb,
                                      params=params))
    b = backend.to_numpy(half.rotate(backend.from_numpy(x, dtype=dt), pb, params=params))
    np.testing.assert_allclose(a, b[..., perm], rtol=0,
                               atol=4 * EPS[_wide(backend)] * float(np.abs(b).max()))


def test_native_rotation_matches_generic(backend: Any) -> None:
    enc, params = _learned(backend, dim=16, max_position_embeddings=64, sep_head=True,
                           num_kv_heads=2)
    rng = np.random.default_rng(6)
    pb = backend.from_numpy(rng.integers(0, 300, size=(2, 1, 5)))
    for name, dt in backend.float_dtypes().items():
        xb = backend.from_numpy(rng.standard_normal((2, 4, 5, 16)), dtype=dt)
        fast = enc._rotate(xb, pb, offset=0, params=params, seq_len=None, native=True)
        ref = enc._rotate(xb, pb, offset=0, params=params, seq_len=None, native=False)
        assert fast.dtype == ref.dtype == xb.dtype and tuple(fast.shape) == tuple(ref.shape)
        f, r = (np.asarray(backend.to_numpy(t), dtype=np.float64) for t in (fast, ref))
        np.testing.assert_allclose(f, r, rtol=0, atol=2 * EPS[name] * float(np.abs(r).max()),
                                   err_msg=name)


# -- without params: RoPE on the retained frequencies ------------------------------------------------
def test_without_params_the_coefficients_are_the_identity(backend: Any) -> None:
    enc = per.get_encoder("fope", dim=16, max_position_embeddings=64)
    eye = np.eye(enc.num_frequencies)
    dt = backend.float_dtypes()[_wide(backend)]
    ident = {k: backend.from_numpy(eye, dtype=dt) for k in enc.param_shapes()}
    rng = np.random.default_rng(7)
    xb = backend.from_numpy(rng.standard_normal((2, 5, 16)), dtype=dt)
    pb = backend.from_numpy(rng.integers(0, 900, size=5))
    plain = backend.to_numpy(enc.rotate(xb, pb))
    np.testing.assert_allclose(plain, backend.to_numpy(enc.rotate(xb, pb, params=ident)),
                               rtol=0, atol=4 * EPS[_wide(backend)] * float(np.abs(plain).max()))
    # the clipped pairs (k >= D, both halves) pass through bit for bit, as vLLM's own test says
    d, x = enc.num_frequencies, backend.to_numpy(xb)
    for lo in (d, 8 + d):
        np.testing.assert_array_equal(plain[..., lo:lo + 8 - d], x[..., lo:lo + 8 - d])
    # with every frequency kept it is RoPE, bit for bit
    every = per.get_encoder("fope", dim=16, max_position_embeddings=64, num_inv_freq=8)
    rope = per.get_encoder("rotary", dim=16)
    np.testing.assert_array_equal(backend.to_numpy(every.rotate(xb, pb)),
                                  backend.to_numpy(rope.rotate(xb, pb)))


def test_frequencies_and_init() -> None:
    enc = per.get_encoder("fope", dim=64, max_position_embeddings=512, theta=10000.0)
    omega = 10000.0 ** (-np.arange(0, 64, 2) / 64)
    np.testing.assert_allclose(enc.frequencies(), omega[omega > 2 * np.pi / 512], rtol=1e-15)
    assert enc.num_frequencies == 16 and enc.param_shapes()["cos_coef"] == (16, 16)
    sep = enc.replace(sep_head=True, num_kv_heads=4, init_factor=0.5)
    p = sep.init(np, seed=0, dtype=np.float64)
    assert set(p) == {"cos_coef", "sin_coef"} and p["sin_coef"].shape == (4, 16, 16)
    noise = np.stack([p["cos_coef"], p["sin_coef"]]) - np.eye(16)
    assert np.all(p["cos_coef"] == p["cos_coef"].astype(np.float32))  # float32-exact
    assert abs(float(noise.std()) - 0.5 / np.sqrt(16)) < 0.01  # xavier: gain·sqrt(2/(D+D))
    assert abs(float(noise.mean())) < 0.01
    zero = enc.replace(init_factor=0.0).init(np)
    np.testing.assert_array_equal(zero["cos_coef"], np.eye(16))


# -- training ----------------------------------------------------------------------------------------
def test_training_steps_move_both_coefficients(backend: Any) -> None:
    """After an SGD step the output is the formula at the new values, and gradients reach every
    KV head's cos and sin coefficients (queries of 4 heads sharing 2 KV heads)."""
    grad = backend.grad
    if grad(lambda p: p["x"]) is None:
        pytest.skip(f"{backend.name} has no autodiff")
    enc = per.get_encoder("fope", dim=16, max_position_embeddings=64, sep_head=True,
                          num_kv_heads=2)
    wide = _wide(backend)
    dt = backend.float_dtypes()[wide]
    params = enc.init(backend.native(), seed=0, dtype=dt)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 6, 16))
    xb, pos = backend.from_numpy(x, dtype=dt), rng.integers(0, 200, size=6)
    pb = backend.from_numpy(pos)
    target = backend.from_numpy(rng.standard_normal((4, 6, 16)), dtype=dt)

    def loss(p: Any) -> Any:
        return ((enc.rotate(xb, pb, params=p) - target) ** 2).sum()

    for _ in range(2):
        g = grad(loss)(params)
        for key in params:
            per_head = np.abs(np.asarray(backend.to_numpy(g[key]))).reshape(2, -1).max(axis=1)
            assert np.all(per_head > 0), (key, per_head)
        params = {key: params[key] - 1e-2 * g[key] for key in params}
    got = backend.to_numpy(enc.rotate(xb, pb, params=params))
    params_np = {k: np.asarray(backend.to_numpy(v), dtype=np.float64) for k, v in params.items()}
    want = reference(enc, x, pos, params_np)
    np.testing.assert_allclose(got, want, rtol=0,
                               atol=_tolerance(enc, wide, wide, x, params_np, float(pos.max())))


# -- errors ------------------------------------------------------------------------------------------
BASE = {"dim": 16, "max_position_embeddings": 64}


@pytest.mark.parametrize(("changes", "option"), [
    ({"dim": 15}, "dim"),
    ({"dim": 0}, "dim"),
    ({"max_position_embeddings": 6}, "max_position_embeddings"),
    ({"theta": 1.0}, "theta"),
    ({"theta": -3.0}, "theta"),
    ({"num_inv_freq": 0}, "num_inv_freq"),
    ({"num_inv_freq": 9}, "num_inv_freq"),
    ({"sep_head": True}, "num_kv_heads"),
    ({"num_kv_heads": 2}, "num_kv_heads"),
    ({"sep_head": True, "num_kv_heads": 0}, "num_kv_heads"),
    ({"init_factor": -0.1}, "init_factor"),
    ({"init_factor": float("nan")}, "init_factor"),
    ({"layout": "neox"}, "layout"),
    ({"sep_head": "yes"}, "sep_head"),
])
def test_bad_options_name_the_option(changes: dict[str, Any], option: str) -> None:
    with pytest.raises((ValueError, TypeError), match=f"option '{option}'") as info:
        per.get_encoder("fope", **{**BASE, **changes})
    assert repr(changes.get(option)) in str(info.value)


def test_missing_training_length_is_named() -> None:
    with pytest.raises(TypeError, match="max_position_embeddings"):
        per.get_encoder("fope", dim=16)


def test_bad_calls_say_what_is_wrong() -> None:
    enc = per.get_encoder("fope", **BASE, sep_head=True, num_kv_heads=2)
    params = enc.init(np)
    with pytest.raises(ValueError, match=r"x.shape\[-3\]=3, but should be a positive multiple "
                                         r"of num_kv_heads=2"):
        enc.rotate(np.zeros((3, 5, 16)), params=params)
    with pytest.raises(ValueError, match=r"heads, seq, dim\), got x.shape=\(5, 16\)"):
        enc.rotate(np.zeros((5, 16)), params=params)
    with pytest.raises(ValueError, match=r"params\['cos_coef'\].shape=\(3, 3\), but should be "
                                         r"\(2, 3, 3\)"):
        enc.rotate(np.zeros((2, 5, 16)), params={**params, "cos_coef": np.eye(3)})
    with pytest.raises(ValueError, match="heads=3"):
        enc.tables(np.arange(4), params=params, heads=3)
    shared = per.get_encoder("fope", **BASE)
    with pytest.raises(ValueError, match="heads=4 is only used with sep_head=True"):
        shared.tables(np.arange(4), params=shared.init(np), heads=4)
    with pytest.raises(ValueError, match=r"keys \['cos_coef', 'sin_coef'\], got \['cos_coef'\]"):
        shared.rotate(np.zeros((2, 5, 16)), params={"cos_coef": np.eye(3)})


# -- the conformance suite with two KV heads ---------------------------------------------------------
TWO_KV = ("fope", {"dim": 16, "max_position_embeddings": 64, "sep_head": True, "num_kv_heads": 2})


@parametrize_with_checks([TWO_KV])
def test_conformance_two_kv_heads(case: Case) -> None:
    case.run()


def test_two_kv_heads_pass_the_whole_suite(backend: Any) -> None:
    """Issue 42: check_encoder(...).ok was False (check_shapes errors on x of shape (16,)), and
    the test above left the check out. check_shapes's probes of positions () and (2, 1, 4)
    rotate x of shape (16,) (no head axis) and (2, 3, 4, 16) (3 heads, not a multiple of 2),
    which per-KV-head coefficients cannot rotate: FoPE declares the exemption, with the reason;
    the shapes it takes are tested below. One KV head takes every shape: no exemption."""
    report = check_encoder(TWO_KV[0], backends=[backend.name], **TWO_KV[1])
    assert report.ok, str(report)
    (row,) = [r for r in report.rows if r.check == "check_shapes"]
    assert row.status == "exempt"
    assert "num_kv_heads=2" in row.message and "multiple of num_kv_heads" in row.message
    one = check_encoder("fope", backends=[backend.name],
                        **{**TWO_KV[1], "num_kv_heads": 1})
    assert one.ok and all(r.status == "passed" for r in one.rows if r.check == "check_shapes")
    assert per.get_encoder("fope", **{**TWO_KV[1], "num_kv_heads": 1}).exempt_checks == {}


def test_shapes_two_kv_heads(backend: Any) -> None:
    enc = per.get_encoder(TWO_KV[0], **TWO_KV[1])
    params = enc.init(backend.native())
    rng = np.random.default_rng(9)
    x = backend.from_numpy(rng.standard_normal((2, 4, 7, 16)),
                           dtype=params["cos_coef"].dtype)
    for shape in [(), (7,), (1, 7), (2, 1, 7), (4, 7), (2, 4, 7)]:
        pos = backend.from_numpy(rng.integers(0, 100, size=shape))
        assert tuple(enc.rotate(x, pos, params=params).shape) == (2, 4, 7, 16), shape
    assert tuple(enc.rotate(x, params=params, offset=3).shape) == (2, 4, 7, 16)
    cos, _ = enc.cos_sin(backend.from_numpy(rng.integers(0, 100, size=(3, 7))), params=params)
    assert tuple(cos.shape) == (3, 2, 7, 16)
    cos, _ = enc.cos_sin(backend.from_numpy(np.asarray(5)), params=params)
    assert tuple(cos.shape) == (2, 1, 16)
