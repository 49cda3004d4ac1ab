"""Scaling types of the serving engines (issue 46) against their engine's code re-derived in
float64 NumPy, independently of peregistry's: the frequencies (``_compute_inv_freq``), the cache
(``_compute_cos_sin_cache``: ``cos(t·ω)·mscale``, ``sin(t·ω)·mscale``) and vLLM's
``RotaryEmbedding.forward_native`` (``vllm/model_executor/layers/rotary_embedding/base.py``,
``common.py``: ``x1·cos - x2·sin``, ``x2·cos + x1·sin`` on the first ``rotary_dim`` features,
NeoX halves or GPT-J pairs). Sources, vLLM ``vllm/model_executor/layers/rotary_embedding/``:

* ``ntk_scaling_rope.py`` at 03587f55 (``NTKScalingRotaryEmbedding``), dispatched by
  ``get_rope`` (``__init__.py``) for ``rope_type == "ntk"`` with ``factor`` and ``mixed_b``;
* ``telechat3_scaling_rope.py`` at d5a17e05 (``TeleChat3RoPEScaledRotaryEmbedding``, for
  ``rope_type == "telechat3-yarn"``) over ``yarn_scaling_rope.py`` at 0cd57848 and the YaRN
  helpers of ``common.py`` at 002d181a;
* ``grok1_scaling_rope.py`` at e443db5a (``Grok1ScalingRotaryEmbedding``, built by
  ``models/grok1.py``'s ``get_rope_scaling``), every ``extra_method``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry.testing import Case, parametrize_with_checks
from peregistry.testing._core import EPS

A = np.ndarray[Any, Any]


# -- vLLM, written out in float64 ----------------------------------------------------------------
def base_inv_freq(base: float, rotary_dim: int) -> A:
    """``RotaryEmbedding._compute_inv_freq``: ``1 / base**(arange(0, d, 2) / d)``."""
    return 1.0 / base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def ntk_inv_freq(base: float, rotary_dim: int, scaling_factor: float,
                 mixed_b: float | None) -> A:
    """``NTKScalingRotaryEmbedding._compute_inv_freq``, line by line."""
    base = base * (scaling_factor if mixed_b is None else 1)
    inv_freq = base_inv_freq(base, rotary_dim)
    if mixed_b is None:
        inv_freq = inv_freq / scaling_factor ** (2 / rotary_dim)
    else:
        a = np.log(scaling_factor) / (rotary_dim / 2) ** mixed_b
        lambda_1_m = np.exp(a * np.arange(1, rotary_dim // 2 + 1, dtype=np.float64) ** mixed_b)
        inv_freq = inv_freq / lambda_1_m
    return inv_freq


def yarn_correction_range(low_rot: float, high_rot: float, dim: int, base: float,
                          max_pos: int, truncate: bool = True) -> tuple[float, float]:
    """``common.py``'s ``yarn_find_correction_dim``/``yarn_find_correction_range``."""
    def correction_dim(num_rotations: float) -> float:
        return (dim * math.log(max_pos / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(low_rot), correction_dim(high_rot)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, dim - 1)


def yarn_ramp(low: float, high: float, dim: int) -> A:
    """``yarn_linear_ramp_mask``."""
    if low == high:
        high += 0.001
    return np.clip((np.arange(dim, dtype=np.float64) - low) / (high - low), 0, 1)


def yarn_inv_freq(base: float, rotary_dim: int, scaling_factor: float, max_pos: int,
                  beta_fast: float = 32, beta_slow: float = 1, truncate: bool = True) -> A:
    """``YaRNScalingRotaryEmbedding._compute_inv_freq`` (TeleChat 3's frequencies)."""
    pos_freqs = base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (scaling_factor * pos_freqs)
    low, high = yarn_correction_range(beta_fast, beta_slow, rotary_dim, base, max_pos, truncate)
    mask = 1 - yarn_ramp(low, high, rotary_dim // 2)
    return interpolation * (1 - mask) + extrapolation * mask


def telechat3_mscale(scaling_factor: float, attn_factor: float = 1.0) -> float:
    """``TeleChat3RoPEScaledRotaryEmbedding.__init__``'s ``get_mscale(...) * attn_factor``."""
    return (1.0 if scaling_factor <= 1 else 0.07 * math.log(scaling_factor) + 1.0) * attn_factor


def grok1_inv_freq(base: float, rotary_dim: int, scaling_factor: float, max_pos: int,
                   extra_method: str, extrapolation_factor: float = 1.0) -> A:
    """``Grok1ScalingRotaryEmbedding._compute_inv_freq``, line by line."""
    pos_freqs = base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    inv_freq_extrapolation = 1.0 / pos_freqs
    inv_freq_interpolation = 1.0 / (scaling_factor * pos_freqs)
    low, high = yarn_correction_range(32, 1, rotary_dim, base, max_pos)
    mask = (1 - yarn_ramp(low, high, rotary_dim // 2)) * extrapolation_factor
    if extra_method == "original":
        return inv_freq_extrapolation
    if extra_method in ("yarn", "yarn_linear"):
        return inv_freq_interpolation * (1 - mask) + inv_freq_extrapolation * mask
    if extra_method == "yarn_log":
        return np.exp(np.log(inv_freq_extrapolation) * mask
                      + np.log(inv_freq_interpolation) * (1.0 - mask))
    assert extra_method == "theta_scale"
    exponents = np.arange(0, rotary_dim, 2, dtype=np.float64)
    theta_scale_exponent = base ** (math.log(max_pos * scaling_factor / (2 * math.pi))
                                    / math.log(max_pos / (2 * math.pi)))
    return 1.0 / (theta_scale_exponent ** (exponents / rotary_dim))


def forward_native(x: A, positions: A, inv_freq: A, rotary_dim: int, *, neox: bool,
                   mscale: float = 1.0) -> A:
    """The cache rows of ``positions`` (``cos``/``sin`` of ``t·ω`` times ``mscale``) applied to
    ``x`` ``(..., seq, head_size)``: ``apply_rotary_emb`` on ``x[..., :rotary_dim]``."""
    freqs = np.einsum("i,j -> ij", positions.astype(np.float64), inv_freq)
    return apply_rotary(x, np.cos(freqs) * mscale, np.sin(freqs) * mscale, rotary_dim, neox)


def apply_rotary(x: A, cos: A, sin: A, rotary_dim: int, neox: bool) -> A:
    """``forward_native``'s rotation of ``x`` ``(..., tokens, head_size)``: ``x1·cos - x2·sin``,
    ``x2·cos + x1·sin`` on the first ``rotary_dim`` features, NeoX halves or GPT-J pairs."""
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if neox:
        x1, x2 = rot[..., : rotary_dim // 2], rot[..., rotary_dim // 2:]
    else:
        x1, x2 = rot[..., ::2], rot[..., 1::2]
    o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    out = (np.concatenate((o1, o2), axis=-1) if neox
           else np.stack((o1, o2), axis=-1).reshape(rot.shape))
    return np.concatenate((out, rest), axis=-1)


def _grok1(method: str, extrapolation_factor: float) -> Any:
    return lambda th, d: grok1_inv_freq(th, d, 4.0, 8192, method, extrapolation_factor)


# -- the branches --------------------------------------------------------------------------------
#: (id, scaling, oracle frequencies of (theta, rotary_dim), oracle mscale)
BRANCHES: list[tuple[str, dict[str, Any], Any, float]] = [
    ("ntk-fixed", {"type": "ntk", "factor": 4.0},
     lambda th, d: ntk_inv_freq(th, d, 4.0, None), 1.0),
    ("ntk-mixed", {"type": "ntk", "factor": 8.0, "mixed_b": 0.625},
     lambda th, d: ntk_inv_freq(th, d, 8.0, 0.625), 1.0),
    ("ntk-mixed-b2", {"type": "ntk", "factor": 2.5, "mixed_b": 2.0},
     lambda th, d: ntk_inv_freq(th, d, 2.5, 2.0), 1.0),
    ("telechat3", {"type": "telechat3-yarn", "factor": 4.0,
                   "original_max_position_embeddings": 4096},
     lambda th, d: yarn_inv_freq(th, d, 4.0, 4096), telechat3_mscale(4.0)),
    ("telechat3-attn-notrunc", {"type": "telechat3-yarn", "factor": 8.0, "attn_factor": 0.9,
                                "original_max_position_embeddings": 8192, "truncate": False,
                                "beta_fast": 16.0, "beta_slow": 2.0},
     lambda th, d: yarn_inv_freq(th, d, 8.0, 8192, 16.0, 2.0, False), telechat3_mscale(8.0, 0.9)),
    *[(f"grok1-{m}", {"type": "grok1", "factor": 4.0, "original_max_position_embeddings": 8192,
                      "extra_method": m, "extrapolation_factor": e}, _grok1(m, e), 1.0)
      for m, e in [("yarn_log", 1.0), ("theta_scale", 1.0), ("yarn", 0.5), ("yarn_linear", 1.0),
                   ("original", 1.0)]],
]
SHAPES = [  # (dim, rotary_dim, layout): partial rotary, both layouts
    pytest.param(64, None, "half", id="d64-neox"),
    pytest.param(48, 32, "half", id="d48-rot32-neox"),
    pytest.param(32, 16, "interleaved", id="d32-rot16-gptj"),
]


def _bound(name: str, wide: str, want: A, x: A, reach: float, mscale: float) -> A:
    """Per element: a few roundings of the rotation in its compute dtype, the angle's error in
    ``wide`` (``(reach + 4)·eps``), then one rounding of ``name`` (half an ulp at the value)."""
    compute = name if name in ("float32", "float64") else "float32"
    scale = float(np.abs(x).max()) * 2.0 * mscale
    return (4 * EPS[compute] * scale + 4 * EPS[wide] * scale * (reach + 4)
            + EPS[name] / 2 * np.abs(want))


@pytest.mark.parametrize(("dim", "rotary_dim", "layout"), SHAPES)
@pytest.mark.parametrize(("scaling", "freqs", "mscale"), [b[1:] for b in BRANCHES],
                         ids=[b[0] for b in BRANCHES])
def test_matches_vllm(backend: Any, scaling: dict[str, Any], freqs: Any, mscale: float, dim: int,
                      rotary_dim: int | None, layout: str) -> None:
    """``rotate`` of queries and keys on every dtype, positions past the original length."""
    theta = 500000.0
    enc = per.get_encoder("rotary", dim=dim, rotary_dim=rotary_dim, theta=theta, layout=layout,
                          scaling=scaling)
    rd = rotary_dim or dim
    inv = freqs(theta, rd)
    rng = np.random.default_rng(7)
    pos = np.concatenate((np.arange(5), rng.integers(0, 32768, size=6)))
    wide = "float64" if "float64" in backend.float_dtypes() else "float32"
    for which in ("q", "k"):
        x = rng.standard_normal((3, len(pos), dim))
        for name, dt in backend.float_dtypes().items():
            xb = backend.from_numpy(x, dtype=dt)
            x_in = np.asarray(backend.to_numpy(xb), dtype=np.float64)
            want = forward_native(x_in, pos, inv, rd, neox=layout == "half", mscale=mscale)
            got = np.asarray(backend.to_numpy(enc.rotate(xb, backend.from_numpy(pos))),
                             dtype=np.float64)
            err = np.abs(got - want)
            tol = _bound(name, wide, want, x_in, float(pos.max()), mscale)
            assert np.all(err <= tol), (f"{which} {backend.name} {name}: error "
                                        f"{float(err.max()):.3g}, {int(np.sum(err > tol))} past")


@pytest.mark.parametrize(("scaling", "freqs", "mscale"), [b[1:] for b in BRANCHES],
                         ids=[b[0] for b in BRANCHES])
def test_tables_are_vllms_cache_rows(scaling: dict[str, Any], freqs: Any, mscale: float) -> None:
    """``cos_sin`` (float64 NumPy) are the rows of vLLM's cache, within a float64 rounding of
    the angle."""
    enc = per.get_encoder("rotary", dim=64, theta=10000.0, scaling=scaling)
    pos = np.asarray([0, 1, 17, 4095, 4096, 70000])
    cos, sin = enc.cos_sin(pos, dtype=np.float64)
    t = np.einsum("i,j -> ij", pos.astype(np.float64), freqs(10000.0, 64))
    tol = 8 * EPS["float64"] * (float(pos.max()) + 4) * mscale
    np.testing.assert_allclose(cos[:, :32], np.cos(t) * mscale, rtol=0, atol=tol)
    np.testing.assert_allclose(sin[:, :32], np.sin(t) * mscale, rtol=0, atol=tol)


def test_ntk_formulas_by_hand() -> None:
    """The docstring's closed forms, apart from the oracle: fixed NTK is ``(θ·s)^(-2i/d)/s^(2/d)``,
    and the mixed rule stretches the last frequency by exactly ``s`` (``λ_{d/2} = s``)."""
    d, s = 16, 4.0
    fixed = per.get_encoder("rotary", dim=d, scaling={"type": "ntk", "factor": s})
    mixed = per.get_encoder("rotary", dim=d, scaling={"type": "ntk", "factor": s, "mixed_b": 0.7})
    p = np.asarray([1.0])

    def angles(enc: Any) -> A:
        cos, sin = enc.cos_sin(p, dtype=np.float64)
        return np.arctan2(sin[0, : d // 2], cos[0, : d // 2])

    want = [(1e4 * s) ** (-2 * i / d) / s ** (2 / d) for i in range(d // 2)]
    np.testing.assert_allclose(angles(fixed), want, rtol=1e-12)
    assert math.isclose(angles(mixed)[-1], 1e4 ** (-(d - 2) / d) / s, rel_tol=1e-12)


@pytest.mark.parametrize("bad", [0.0, -1.0, math.inf])
def test_bad_mixed_b_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match=r"mixed_b.*None or a finite number > 0"):
        per.get_encoder("rotary", dim=16, scaling={"type": "ntk", "factor": 2.0, "mixed_b": bad})


@pytest.mark.parametrize("key", ["rope_type", "type"])
@pytest.mark.parametrize("mixed_b", [None, 0.5])
def test_from_hf_config_maps_ntk(key: str, mixed_b: float | None) -> None:
    """``rope_scaling`` / ``rope_parameters`` with ``rope_type`` or the older ``type`` ``"ntk"``:
    ``factor`` and ``mixed_b`` read as vLLM's ``get_rope`` reads them."""
    rope = {key: "ntk", "factor": 2.0, **({} if mixed_b is None else {"mixed_b": mixed_b})}
    config = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
              "max_position_embeddings": 4096, "rope_theta": 10000.0, "rope_scaling": rope}
    enc = per.from_hf_config(config)
    assert enc.options["scaling"] == {"type": "ntk", "factor": 2.0, "mixed_b": mixed_b}
    x = np.random.default_rng(0).standard_normal((2, 9, 64))
    pos = np.arange(9) * 500
    want = forward_native(x, pos, ntk_inv_freq(10000.0, 64, 2.0, mixed_b), 64, neox=True)
    np.testing.assert_allclose(enc.rotate(x, pos), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("key", ["rope_type", "type"])
def test_from_hf_config_maps_telechat3_yarn(key: str) -> None:
    """``rope_type``/``type`` ``"telechat3-yarn"``: YaRN's keys and ``attn_factor``, and the
    cache's ``0.07·ln(factor) + 1`` on every row."""
    rope = {key: "telechat3-yarn", "factor": 4.0, "original_max_position_embeddings": 2048,
            "attn_factor": 1.1, "beta_fast": 32, "beta_slow": 1}
    config = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
              "max_position_embeddings": 8192, "rope_theta": 10000.0, "rope_scaling": rope}
    enc = per.from_hf_config(config)
    assert enc.options["scaling"]["type"] == "telechat3-yarn"
    x = np.random.default_rng(1).standard_normal((2, 9, 64))
    pos = np.arange(9) * 900
    want = forward_native(x, pos, yarn_inv_freq(10000.0, 64, 4.0, 2048), 64, neox=True,
                          mscale=telechat3_mscale(4.0, 1.1))
    np.testing.assert_allclose(enc.rotate(x, pos), want, rtol=0, atol=1e-12)


def test_the_engines_differ_telechat3_against_yarn() -> None:
    """TeleChat 3 and YaRN share their frequencies; their attention factors differ by
    ``0.03·ln(factor)``: YaRN's outputs are 3.8 % larger at ``factor = 4``."""
    common = {"factor": 4.0, "original_max_position_embeddings": 4096}
    tele = per.get_encoder("rotary", dim=64, scaling={"type": "telechat3-yarn", **common})
    yarn = per.get_encoder("rotary", dim=64, scaling={"type": "yarn", **common})
    x = np.random.default_rng(2).standard_normal((5, 64))
    ratio = tele.rotate(x) / yarn.rotate(x)
    np.testing.assert_allclose(ratio, (0.07 * math.log(4) + 1) / (0.1 * math.log(4) + 1),
                               rtol=1e-12)


@pytest.mark.parametrize(("method", "message"), [
    ("yarn_cubic", "extra_method"), ("theta_scale", "original_max_position_embeddings > 2π")])
def test_grok1_bad_values_are_refused(method: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        per.get_encoder("rotary", dim=16, scaling={
            "type": "grok1", "factor": 2.0, "extra_method": method,
            "original_max_position_embeddings": 6 if method == "theta_scale" else 4096})


CASES = [("rotary", {"dim": 16, "scaling": {"type": "ntk", "factor": 4.0}}),
         ("rotary", {"dim": 24, "rotary_dim": 16, "layout": "interleaved",
                     "scaling": {"type": "ntk", "factor": 8.0, "mixed_b": 0.625}}),
         ("rotary", {"dim": 16, "scaling": {"type": "telechat3-yarn", "factor": 4.0,
                                            "original_max_position_embeddings": 64}}),
         ("rotary", {"dim": 16, "scaling": {"type": "grok1", "factor": 4.0,
                                            "original_max_position_embeddings": 64}}),
         ("rotary", {"dim": 16, "scaling": {"type": "grok1", "factor": 4.0,
                                            "extra_method": "theta_scale",
                                            "original_max_position_embeddings": 64}})]


@parametrize_with_checks(CASES)
def test_conformance(case: Case) -> None:
    case.run()


def test_telechat3_is_yarn_with_its_attention_factor() -> None:
    """docs/porting.md: ``yarn`` with ``attention_factor = 0.07·ln(s) + 1`` gives the same
    rotation, bit for bit (the same frequencies, the same factor)."""
    common = {"factor": 4.0, "original_max_position_embeddings": 4096}
    tele = per.get_encoder("rotary", dim=64, scaling={"type": "telechat3-yarn", **common})
    yarn = per.get_encoder("rotary", dim=64, scaling={
        "type": "yarn", **common, "attention_factor": 0.07 * math.log(4.0) + 1.0})
    x = np.random.default_rng(3).standard_normal((9, 64))
    pos = np.arange(9) * 1000
    np.testing.assert_array_equal(tele.rotate(x, pos), yarn.rotate(x, pos))
