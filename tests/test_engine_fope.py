"""FoPE's ``sin_padding`` against both serving engines, each re-derived in float64 NumPy from its
own source (issue 46):

* vLLM ``vllm/model_executor/layers/rotary_embedding/fope.py`` at 151a2c74 (after PR 55243,
  2026-09-03, "Pad FoPE sin cache with 0"): ``sin`` of the clipped pairs padded with 0, shared
  coefficients ``coef[0]``;
* SGLang ``python/sglang/srt/layers/rotary_embedding/rope_variant.py`` at 0b1fd02d
  (``FourierRotaryEmbedding``, as the paper's code and xtuner): ``sin`` padded with 1, applied by
  ``apply_rotary_pos_emb_native`` (``q·cos + rotate_half(q)·sin``).

Both oracles are written from the engines' code, not from peregistry's; the cache's rows, which
the engines build alike but for the padding, are tests/test_fope.py's ``vllm_cache_rows``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_fope import vllm_cache_rows  # the cache's rows, both engines (sin_pad 0 or 1)

import peregistry as per
from peregistry.testing import Case, parametrize_with_checks
from peregistry.testing._core import EPS

A = np.ndarray[Any, Any]


def engine_inv_freq(rotary_dim: int, base: float, max_pos: int, num_inv_freq: int | None) -> A:
    """``_compute_inv_freq`` (identical in both engines)."""
    inv_freq = 1.0 / base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    keep = np.ones(inv_freq.shape, dtype=bool)
    if num_inv_freq is not None:
        keep[num_inv_freq:] = False
    else:
        keep = inv_freq > 2.0 * np.pi / max_pos
    return inv_freq[keep]


def engine_forward(query: A, cos: A, sin: A, head_size: int) -> A:
    """``forward_native`` / ``forward`` on ``query`` ``(tokens, heads·head_size)``: per-KV-head
    rows flattened, the queries viewed as ``(tokens·kv, heads/kv, head_size)``."""
    query = query.reshape(query.shape[0], -1, head_size)
    shape = query.shape
    if cos.ndim == 3:
        cos, sin = cos.reshape(-1, cos.shape[-1]), sin.reshape(-1, sin.shape[-1])
        query = query.reshape(cos.shape[0], -1, head_size)
    half = head_size // 2
    rotated = np.concatenate((-query[..., half:], query[..., :half]), axis=-1)
    return (query * cos[:, None] + rotated * sin[:, None]).reshape(shape)


def engine(x: A, positions: A, params: dict[str, A], *, dim: int, theta: float, max_pos: int,
           num_inv_freq: int | None, sep_head: bool, sin_pad: float) -> A:
    """The engine's result for ``x`` ``(heads, seq, dim)`` at ``positions`` ``(seq,)``."""
    inv = engine_inv_freq(dim, theta, max_pos, num_inv_freq)
    cos, sin = vllm_cache_rows(positions, inv, params["cos_coef"], params["sin_coef"], dim,
                               sep_head, sin_pad)
    heads, seq, _ = x.shape
    query = np.transpose(x, (1, 0, 2)).reshape(seq, heads * dim)
    return np.transpose(engine_forward(query, cos, sin, dim), (1, 0, 2))


ENGINES = [pytest.param(0, id="vllm-pad0"), pytest.param(1, id="sglang-pad1")]
CONFIGS = [
    pytest.param({"dim": 16, "max_position_embeddings": 64}, 3, id="clip-L64"),
    pytest.param({"dim": 24, "max_position_embeddings": 100, "num_inv_freq": 5, "sep_head": True,
                  "num_kv_heads": 3}, 6, id="sep-head-n5-gqa"),
]


def _wide(backend: Any) -> str:
    return "float64" if "float64" in backend.float_dtypes() else "float32"


def _bound(name: str, wide: str, want: A, x: A, params: dict[str, A], reach: float,
           d: int) -> A:
    """Per element: the rotation's roundings in its compute dtype, the tables' in ``wide`` (each
    of the ``d`` terms ``coef·cos(p·ω)`` off by ``(|p| + 4)·eps``), then one rounding of
    ``name`` (half an ulp at the value)."""
    compute = name if name in ("float32", "float64") else "float32"
    colsum = max(float(np.abs(v).sum(axis=-2).max()) for v in params.values())
    scale = float(np.abs(x).max()) * 2.0 * max(colsum, 1.0)
    return (8 * EPS[compute] * scale + 4 * EPS[wide] * scale * (reach + d + 4)
            + EPS[name] / 2 * np.abs(want))


@pytest.mark.parametrize("sin_pad", ENGINES)
@pytest.mark.parametrize(("options", "heads"), CONFIGS)
@pytest.mark.parametrize("learned", [True, False], ids=["params", "identity"])
def test_matches_engine(backend: Any, options: dict[str, Any], heads: int, sin_pad: int,
                        learned: bool) -> None:
    """``sin_padding=0`` is vLLM's ``forward_native``, ``1`` SGLang's, on every dtype, positions
    up to three training lengths; with params and without (identity coefficients)."""
    enc = per.get_encoder("fope", **options, sin_padding=sin_pad)
    d = enc.num_frequencies
    assert d < options["dim"] // 2  # clipped pairs exist: the padding is reached
    rng = np.random.default_rng(10 + sin_pad)
    wide = _wide(backend)
    shapes = enc.param_shapes()
    draw = {k: np.eye(d) + (0.5 * rng.standard_normal(s) if learned else np.zeros(s))
            for k, s in shapes.items()}
    params = {k: backend.from_numpy(v, dtype=backend.float_dtypes()[wide]) for k, v in draw.items()}
    params_np = {k: np.asarray(backend.to_numpy(v), dtype=np.float64) for k, v in params.items()}
    pos = rng.integers(0, 3 * options["max_position_embeddings"], size=9)
    x = rng.standard_normal((heads, 9, options["dim"]))
    for name, dt in backend.float_dtypes().items():
        xb = backend.from_numpy(x, dtype=dt)
        x_in = np.asarray(backend.to_numpy(xb), dtype=np.float64)
        want = engine(x_in, pos, params_np, dim=options["dim"],
                      theta=float(options.get("theta", 10000.0)),
                      max_pos=options["max_position_embeddings"],
                      num_inv_freq=options.get("num_inv_freq"),
                      sep_head=bool(options.get("sep_head")), sin_pad=float(sin_pad))
        out = enc.rotate(xb, backend.from_numpy(pos), params=params if learned else None)
        got = np.asarray(backend.to_numpy(out), dtype=np.float64)
        err = np.abs(got - want)
        tol = _bound(name, wide, want, x_in, params_np, float(pos.max()), d)
        assert np.all(err <= tol), (f"{backend.name} {name} sin_padding={sin_pad}: error "
                                    f"{float(err.max()):.3g}, {int(np.sum(err > tol))} past")


def test_the_engines_differ_on_the_clipped_pairs(backend: Any) -> None:
    """Where the paddings differ, and by how much: the retained pairs agree bit for bit; a
    clipped pair ``(a, b)`` passes through with 0 and becomes ``(a - b, b + a)`` with 1."""
    xp = backend.namespace()
    zero, one = (per.get_encoder("fope", dim=16, max_position_embeddings=64, sin_padding=s)
                 for s in (0, 1))
    d = zero.num_frequencies  # 3 of 8 pairs kept
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 16))
    dt = backend.float_dtypes()[_wide(backend)]
    params = {k: backend.from_numpy(v, dtype=dt) for k, v in zero.init(np, seed=1).items()}
    a = np.asarray(backend.to_numpy(zero.rotate(backend.from_numpy(x, dtype=dt), params=params)))
    b = np.asarray(backend.to_numpy(one.rotate(backend.from_numpy(x, dtype=dt), params=params)))
    kept = np.r_[0:d, 8:8 + d]
    np.testing.assert_array_equal(a[..., kept], b[..., kept])
    x_in = np.asarray(backend.to_numpy(backend.from_numpy(x, dtype=dt)), dtype=np.float64)
    lo, hi = x_in[..., d:8], x_in[..., 8 + d:]
    eps = EPS[_wide(backend)]
    np.testing.assert_allclose(a[..., d:8], lo, rtol=0, atol=eps)
    np.testing.assert_allclose(a[..., 8 + d:], hi, rtol=0, atol=eps)
    np.testing.assert_allclose(b[..., d:8], lo - hi, rtol=0, atol=4 * eps)
    np.testing.assert_allclose(b[..., 8 + d:], hi + lo, rtol=0, atol=4 * eps)
    del xp


def test_no_clipped_pairs_no_difference(backend: Any) -> None:
    """Every frequency kept (``num_inv_freq = dim/2``): the padding is never reached."""
    opts = {"dim": 16, "max_position_embeddings": 64, "num_inv_freq": 8}
    zero, one = (per.get_encoder("fope", **opts, sin_padding=s) for s in (0, 1))
    dt = backend.float_dtypes()[_wide(backend)]
    x = backend.from_numpy(np.random.default_rng(5).standard_normal((3, 16)), dtype=dt)
    params = {k: backend.from_numpy(v, dtype=dt) for k, v in zero.init(np, seed=2).items()}
    np.testing.assert_array_equal(backend.to_numpy(zero.rotate(x, params=params)),
                                  backend.to_numpy(one.rotate(x, params=params)))
    assert one.exempt_checks == {}


def test_default_is_vllms_and_bad_values_are_refused() -> None:
    """The default is 0 (vLLM, the newest reference); anything but 0 and 1 is refused, naming
    the option, the value and what is allowed."""
    assert per.get_encoder("fope", dim=16, max_position_embeddings=64).options["sin_padding"] == 0
    for bad in (2, -1, 0.5):
        with pytest.raises((ValueError, TypeError), match=r"sin_padding.*0 or 1"):
            per.get_encoder("fope", dim=16, max_position_embeddings=64, sin_padding=bad)


CASES = [
    ("fope", {"dim": 16, "max_position_embeddings": 64, "sin_padding": 1}),
    ("fope", {"dim": 16, "max_position_embeddings": 64, "num_inv_freq": 5, "sep_head": True,
              "num_kv_heads": 1, "layout": "interleaved", "sin_padding": 1}),
]


@parametrize_with_checks(CASES)
def test_conformance_with_sin_padding_one(case: Case) -> None:
    """The whole suite; only the norm law is exempt (declared, with its reason)."""
    case.run()
