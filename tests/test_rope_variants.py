"""The RoPE variants of transformers 5.23 that ``rotary``/``mrope`` reproduce through options:
the ``proportional`` scaling type (Gemma 4), M-RoPE with partial rotary (``mrope`` ``rotary_dim``:
Qwen3.5, GLM-4V), partial rotary on the last features (``rotary_features="last"``: DeepSeek-V4)
and the opposite rotation (``direction="negative"``: nanochat). Each against an independent
float64 NumPy formula on every backend, against the model's own code in the torch env, its
errors, and the conformance suite (the laws the suite states for the first features are checked
here on the last ones)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry.rope import RotaryTables
from peregistry.testing import Case, parametrize_with_checks
from peregistry.testing._core import EPS

needs_hf = pytest.mark.skipif("torch" not in BACKENDS,
                              reason="compared with transformers in the torch env")


def ref_rotate(x: np.ndarray, pos: Any, inv: np.ndarray, *, interleaved: bool = False,
               sign: float = 1.0) -> np.ndarray:
    """RoFormer's rotation (eq. 34) of the first ``2·len(inv)`` features, pair by pair, in
    float64, by the angle ``sign·p·ω_i``; ``pos`` is ``(A, ...)`` per pair's axis when ``inv``
    comes with an axis map, else broadcasts against ``x.shape[:-1]``."""
    x = np.asarray(x, dtype=np.float64)
    rd = 2 * len(inv)
    pos = np.broadcast_to(np.asarray(pos, dtype=np.float64), x.shape[:-1])
    out = x.copy()
    for i, w in enumerate(inv):
        ia, ib = (2 * i, 2 * i + 1) if interleaved else (i, i + rd // 2)
        ang = sign * pos * w
        a, b = x[..., ia], x[..., ib]
        out[..., ia] = a * np.cos(ang) - b * np.sin(ang)
        out[..., ib] = a * np.sin(ang) + b * np.cos(ang)
    return out


def _run(backend: Any, enc: Any, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    wide = "float64" if "float64" in backend.float_dtypes() else "float32"
    xb = backend.from_numpy(x, dtype=backend.float_dtypes()[wide])
    return np.asarray(backend.to_numpy(enc.rotate(xb, backend.from_numpy(pos))), np.float64)


def _as_run(backend: Any, x: np.ndarray) -> np.ndarray:
    """``x`` as :func:`_run` hands it over (float32 on backends without float64)."""
    wide = np.float64 if "float64" in backend.float_dtypes() else np.float32
    return np.asarray(x, dtype=wide).astype(np.float64)


def _eps(backend: Any) -> float:
    """The unit roundoff of the dtype :func:`_run` computes in (float32 without float64)."""
    return EPS["float64" if "float64" in backend.float_dtypes() else "float32"]


def _tol(backend: Any, x: np.ndarray, *, max_angle: float) -> float:
    """How far a rotation of ``x`` computed in :func:`_run`'s dtype may be from the float64
    reference: each angle ``p·ω`` (``ω <= 1`` here) rounded in that dtype is off by up to
    ``max_angle·eps``, which moves a pair by its length (at most ``√2·max|x|``) times that; the
    cast of ``x``, cos/sin and the rotation's two products and sum add a few more ulps (16)."""
    return _eps(backend) * math.sqrt(2) * float(np.abs(x).max()) * (max_angle + 16)


# -- proportional (Gemma 4) -----------------------------------------------------------------------
@pytest.mark.parametrize(("dim", "f", "factor", "k"), [
    (16, 0.25, 1.0, 2), (16, 1.0, 2.0, 8), (16, 0.0, 1.0, 0), (20, 0.3, 1.0, 3), (8, 0.5, 4.0, 2)])
def test_proportional_frequencies(dim: int, f: float, factor: float, k: int) -> None:
    """ω_i = θ^(-2i/d)/factor for i < ⌊f·d/2⌋, else 0 (transformers' proportional type)."""
    e: Any = per.get_encoder("rotary", dim=dim, theta=500.0, scaling={
        "type": "proportional", "partial_rotary_factor": f, "factor": factor})
    want = np.array([500.0 ** (-2 * i / dim) / factor if i < k else 0.0 for i in range(dim // 2)])
    np.testing.assert_allclose(e.inv_freq(), want, rtol=1e-15, atol=0)


def test_proportional_rotates_the_first_pairs_of_the_half_layout(backend: Any) -> None:
    e = per.get_encoder("rotary", dim=16, theta=1e6, scaling={
        "type": "proportional", "partial_rotary_factor": 0.25})
    x = np.random.default_rng(0).standard_normal((2, 9, 16))
    pos = np.arange(9) * 37
    inv = np.array([1e6 ** (-2 * i / 16) if i < 2 else 0.0 for i in range(8)])
    out = _run(backend, e, x, pos)
    np.testing.assert_allclose(out, ref_rotate(x, pos, inv), rtol=0,
                               atol=_tol(backend, x, max_angle=pos.max()))
    still = [2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15]  # pairs (2, 10) ... (7, 15) do not turn
    np.testing.assert_array_equal(out[..., still], _as_run(backend, x)[..., still])
    assert np.abs(out[..., [0, 1, 8, 9]] - x[..., [0, 1, 8, 9]]).max() > 0.1


def test_proportional_with_factor_one_is_plain_rope_and_linear_otherwise() -> None:
    full = per.get_encoder("rotary", dim=16, scaling={"type": "proportional"})
    np.testing.assert_array_equal(full.inv_freq(), per.get_encoder("rotary", dim=16).inv_freq())
    lin = per.get_encoder("rotary", dim=16, scaling={"type": "linear", "factor": 4.0})
    prop = per.get_encoder("rotary", dim=16, scaling={"type": "proportional", "factor": 4.0})
    np.testing.assert_array_equal(prop.inv_freq(), lin.inv_freq())


@pytest.mark.parametrize(("scaling", "pattern"), [
    ({"type": "proportional", "partial_rotary_factor": 1.5},
     "'partial_rotary_factor' must be a number in \\[0, 1\\], got 1.5"),
    ({"type": "proportional", "factor": 0.5}, "'factor' must be a number >= 1, got 0.5"),
    ({"type": "proportional", "rope_theta": 1.0}, "no parameter 'rope_theta'"),
])
def test_proportional_bad_parameters(scaling: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        per.get_encoder("rotary", dim=16, scaling=scaling)


@needs_hf
@pytest.mark.parametrize(("head_dim", "f", "factor"), [(32, 0.25, 1.0), (40, 0.3, 2.0),
                                                       (16, 1.0, 1.0)])
def test_proportional_matches_gemma4(head_dim: int, f: float, factor: float) -> None:
    """Gemma 4's full-attention rotary module (global_head_dim) and apply_rotary_pos_emb."""
    transformers = pytest.importorskip("transformers")
    import torch
    from transformers.models.gemma4 import modeling_gemma4 as m

    rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": f,
                               "factor": factor, "rope_theta": 1e6}}
    cfg = transformers.Gemma4TextConfig(head_dim=8, global_head_dim=head_dim, num_hidden_layers=2,
                                        layer_types=["sliding_attention", "full_attention"],
                                        rope_parameters=rope)
    e: Any = per.from_hf_config(cfg, layer_type="full_attention")
    assert e.options["dim"] == head_dim and e.options["rotary_dim"] is None
    q = torch.randn(1, 2, 40, head_dim, generator=torch.Generator().manual_seed(0))
    ids = torch.arange(40)[None]
    cos, sin = m.Gemma4TextRotaryEmbedding(cfg)(q, ids, "full_attention")
    theirs = m.apply_rotary_pos_emb(q, cos, sin)
    tol = 8 * float(np.finfo(np.float32).eps) * 40 * float(q.abs().max())
    assert float((e.rotate(q, ids[0]) - theirs).abs().max()) <= tol
    our_cos, our_sin = e.cos_sin(ids, dtype=torch.float32)
    assert float((our_cos - cos).abs().max()) <= tol and float((our_sin - sin).abs().max()) <= tol


# -- M-RoPE with partial rotary (Qwen3.5, GLM-4V) ----------------------------------------------------
@pytest.mark.parametrize("interleaved", [False, True])
def test_mrope_partial_rotary(backend: Any, interleaved: bool) -> None:
    """The first rotary_dim features are M-RoPE of width rotary_dim (ω_i = θ^(-2i/rotary_dim));
    the others pass through."""
    e = per.get_encoder("mrope", dim=24, rotary_dim=16, sections=(4, 2, 2), theta=1e4,
                        interleaved=interleaved)
    x = np.random.default_rng(1).standard_normal((2, 7, 24))
    pos = np.random.default_rng(2).integers(0, 500, size=(3, 7))
    axes = ([0, 1, 2, 0, 1, 2, 0, 0] if interleaved else [0, 0, 0, 0, 1, 1, 2, 2])
    inv = np.array([1e4 ** (-2 * i / 16) for i in range(8)])
    want = x.copy()
    for i, a in enumerate(axes):  # one pair at a time, at its axis's position
        one = np.zeros(8)
        one[i] = inv[i]
        part = ref_rotate(x[..., :16], pos[a], one)
        want[..., [i, i + 8]] = part[..., [i, i + 8]]
    out = _run(backend, e, x, pos)
    np.testing.assert_allclose(out, want, atol=_tol(backend, x, max_angle=pos.max()), rtol=0)
    np.testing.assert_array_equal(out[..., 16:], _as_run(backend, x)[..., 16:])


def test_mrope_pair_axes(backend: Any) -> None:
    """An explicit axis per pair (Ernie-4.5-VL's map): pair i turns by p_{pair_axes[i]}·ω_i."""
    axes = (1, 2, 1, 2, 1, 2, 0, 0)
    e = per.get_encoder("mrope", dim=16, sections=(2, 3, 3), pair_axes=axes,
                        layout="interleaved")
    x = np.random.default_rng(6).standard_normal((2, 7, 16))
    pos = np.random.default_rng(7).integers(0, 500, size=(3, 7))
    inv = np.array([1e4 ** (-2 * i / 16) for i in range(8)])
    want = x.copy()
    for i, a in enumerate(axes):
        one = np.zeros(8)
        one[i] = inv[i]
        part = ref_rotate(x, pos[a], one, interleaved=True)
        want[..., [2 * i, 2 * i + 1]] = part[..., [2 * i, 2 * i + 1]]
    np.testing.assert_allclose(_run(backend, e, x, pos), want, rtol=0,
                               atol=_tol(backend, x, max_angle=pos.max()))


@pytest.mark.parametrize(("options", "pattern"), [
    ({"dim": 16, "sections": (2, 3, 3), "pair_axes": (1, 2, 1, 2, 1, 2, 0)},
     "'pair_axes' must be None or 8 axis indices"),
    ({"dim": 16, "sections": (2, 3, 3), "pair_axes": (1, 1, 1, 2, 1, 2, 0, 0)},
     "axis a appearing sections\\[a\\] times \\(\\(2, 3, 3\\)\\), got \\(1, 1, 1"),
    ({"dim": 16, "sections": (2, 3, 3), "pair_axes": (1, 2, 1, 2, 1, 2, 0, 0),
      "interleaved": True}, "'pair_axes' must be None when interleaved=True"),
    ({"dim": 16, "rotary_dim": 24, "sections": (4, 4, 4)}, "'rotary_dim' must .*<= dim \\(16\\), got 24"),
    ({"dim": 16, "rotary_dim": 7, "sections": (2, 1, 1)}, "'rotary_dim' must .*positive even.*, got 7"),
    ({"dim": 16, "rotary_dim": 8, "sections": (4, 2, 2)},
     "'sections'.*summing to rotary_dim/2 = 4 \\(they sum to 8\\)"),
    ({"dim": 16, "sections": (2, 1, 1)}, "'sections'.*summing to dim/2 = 8"),
])
def test_mrope_rotary_dim_errors(options: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        per.get_encoder("mrope", **options)


def test_mrope_text_equivalent_keeps_the_new_options() -> None:
    e: Any = per.get_encoder("mrope", dim=16, rotary_dim=8, sections=(2, 1, 1),
                             rotary_features="last", direction="negative")
    assert e.text_equivalent() == per.get_encoder("rotary", dim=16, rotary_dim=8,
                                                  rotary_features="last", direction="negative")


@needs_hf
def test_mrope_partial_matches_qwen3_5() -> None:
    transformers = pytest.importorskip("transformers")
    import torch
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m

    cfg = transformers.Qwen3_5TextConfig(head_dim=32, rope_parameters={
        "rope_type": "default", "rope_theta": 1e7, "partial_rotary_factor": 0.5,
        "mrope_section": [3, 3, 2]})
    e: Any = per.from_hf_config(cfg)
    assert (e.name, e.options["rotary_dim"], e.options["interleaved"]) == ("mrope", 16, True)
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 30, 32, generator=gen)
    ids = torch.randint(0, 200, (3, 1, 30), generator=gen)
    cos, sin = m.Qwen3_5TextRotaryEmbedding(cfg)(q, ids)
    theirs = m.apply_rotary_pos_emb(q, q, cos, sin)[0]
    tol = 8 * float(np.finfo(np.float32).eps) * 200 * float(q.abs().max())
    assert float((e.rotate(q, ids[:, :, None, :]) - theirs).abs().max()) <= tol


# -- rotary_features="last" (DeepSeek-V4) ---------------------------------------------------------
@pytest.mark.parametrize("name", ["rotary", "mrope"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_last_features_rotate(backend: Any, name: str, layout: str) -> None:
    """[pass | rope]: the last rotary_dim features turn exactly as a head of rotary_dim would;
    the first pass through bit for bit; norms are kept (the suite's laws, on the last part)."""
    extra = {"sections": (2, 1, 1)} if name == "mrope" else {}
    e: Any = per.get_encoder(name, dim=20, rotary_dim=8, layout=layout,
                             rotary_features="last", **extra)
    x = np.random.default_rng(3).standard_normal((2, 5, 20))
    pos = np.arange(5) * 101
    ids = np.stack([pos] * 3) if name == "mrope" else pos
    out = _run(backend, e, x, ids)
    np.testing.assert_array_equal(out[..., :12], _as_run(backend, x)[..., :12])
    inv = np.array([1e4 ** (-2 * i / 8) for i in range(4)])
    want = ref_rotate(x[..., 12:], pos, inv, interleaved=layout == "interleaved")
    tol = _tol(backend, x[..., 12:], max_angle=pos.max())
    np.testing.assert_allclose(out[..., 12:], want, atol=tol, rtol=0)
    # a rotation by any angle keeps norms: only the cast, cos/sin and the products' roundings
    np.testing.assert_allclose(np.sum(out**2, -1), np.sum(x**2, -1), rtol=16 * _eps(backend))
    # the tables' path and the cos_sin table agree with rotate
    xb = backend.from_numpy(x)
    pb = backend.from_numpy(ids)
    np.testing.assert_array_equal(backend.to_numpy(e.tables(pb).rotate(xb)),
                                  backend.to_numpy(e.rotate(xb, pb)))
    wide = backend.float_dtypes()["float64" if "float64" in backend.float_dtypes() else "float32"]
    cos, sin = (np.asarray(backend.to_numpy(t), np.float64) for t in e.cos_sin(pb, dtype=wide))
    xr = x[..., 12:]
    rot = (np.stack((-xr[..., 1::2], xr[..., 0::2]), -1).reshape(xr.shape)
           if layout == "interleaved" else np.concatenate((-xr[..., 4:], xr[..., :4]), -1))
    np.testing.assert_allclose(out[..., 12:], xr * cos + rot * sin, atol=tol, rtol=0)


def test_last_features_with_the_whole_head_is_first(backend: Any) -> None:
    x = np.random.default_rng(4).standard_normal((2, 6, 16))
    pos = np.arange(6)
    a = _run(backend, per.get_encoder("rotary", dim=16, rotary_features="last"), x, pos)
    b = _run(backend, per.get_encoder("rotary", dim=16), x, pos)
    np.testing.assert_array_equal(a, b)


def test_rotary_features_error() -> None:
    with pytest.raises(ValueError, match="'rotary_features' must be one of 'first', 'last', got 'middle'"):
        per.get_encoder("rotary", dim=16, rotary_features="middle")
    with pytest.raises(ValueError, match="rotary_features.*'first', 'last'.*'end'"):
        RotaryTables(np.ones((3, 2)), np.ones((3, 2)), rotary_features="end")


@needs_hf
def test_last_features_match_deepseek_v4() -> None:
    transformers = pytest.importorskip("transformers")
    import torch
    from transformers.models.deepseek_v4 import modeling_deepseek_v4 as m

    cfg = transformers.DeepseekV4Config(head_dim=48, partial_rotary_factor=16 / 48)
    for label in ("main", "compress"):
        e: Any = per.from_hf_config(cfg, layer_type=label)
        assert (e.options["dim"], e.options["rotary_dim"]) == (48, 16), e
        assert (e.options["rotary_features"], e.options["layout"]) == ("last", "interleaved")
        q = torch.randn(1, 2, 30, 48, generator=torch.Generator().manual_seed(0))
        ids = torch.arange(30)[None]
        cos, sin = m.DeepseekV4RotaryEmbedding(cfg)(q, ids, label)
        theirs = m.apply_rotary_pos_emb(q, cos, sin)
        tol = 8 * float(np.finfo(np.float32).eps) * 30 * float(q.abs().max())
        assert float((e.rotate(q, ids[0]) - theirs).abs().max()) <= tol, label


# -- direction="negative" (nanochat) ------------------------------------------------------------------
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_negative_direction(backend: Any, layout: str) -> None:
    """Pairs turn by -p·ω: the inverse of the positive rotation; the dot product still depends
    only on m - n."""
    neg = per.get_encoder("rotary", dim=16, layout=layout, direction="negative")
    x = np.random.default_rng(5).standard_normal((2, 7, 16))
    pos = np.arange(7) * 53
    inv = np.array([1e4 ** (-2 * i / 16) for i in range(8)])
    out = _run(backend, neg, x, pos)
    want = ref_rotate(x, pos, inv, interleaved=layout == "interleaved", sign=-1.0)
    np.testing.assert_allclose(out, want, atol=_tol(backend, x, max_angle=pos.max()), rtol=0)
    pos_enc = per.get_encoder("rotary", dim=16, layout=layout)
    back = _run(backend, pos_enc, out, pos)  # two rotations: twice the angles' error
    np.testing.assert_allclose(back, x, atol=_tol(backend, x, max_angle=2 * pos.max()), rtol=0)


def test_direction_error() -> None:
    with pytest.raises(ValueError, match="'direction' must be one of 'positive', 'negative', got 'clockwise'"):
        per.get_encoder("rotary", dim=16, direction="clockwise")


@needs_hf
def test_negative_direction_matches_nanochat() -> None:
    transformers = pytest.importorskip("transformers")
    import torch
    from transformers.models.nanochat import modeling_nanochat as m

    cfg = transformers.NanoChatConfig(hidden_size=64, num_attention_heads=2)
    e: Any = per.from_hf_config(cfg)
    assert e.options["direction"] == "negative"
    q = torch.randn(1, 2, 30, 32, generator=torch.Generator().manual_seed(0))
    ids = torch.arange(30)[None]
    cos, sin = m.NanoChatRotaryEmbedding(cfg)(q, ids)
    theirs = m.apply_rotary_pos_emb(q, q, cos, sin)[0]
    tol = 8 * float(np.finfo(np.float32).eps) * 30 * float(q.abs().max())
    assert float((e.rotate(q, ids[0]) - theirs).abs().max()) <= tol
    flipped = per.get_encoder("rotary", **{**e.options, "direction": "positive"})
    assert float((flipped.rotate(q, ids[0]) - theirs).abs().max()) > 100 * tol


# -- defaults unchanged, and the conformance suite ------------------------------------------------------
def test_defaults_keep_todays_encoders() -> None:
    e: Any = per.get_encoder("rotary", dim=16)
    assert (e.options["rotary_features"], e.options["direction"]) == ("first", "positive")
    assert e == per.get_encoder("rotary", dim=16, rotary_features="first", direction="positive")
    m: Any = per.get_encoder("mrope", dim=16, sections=(2, 3, 3))
    assert m.options["rotary_dim"] is None and m == per.get_encoder(
        "mrope", dim=16, sections=(2, 3, 3), rotary_dim=None, direction="positive")
    assert not e.exempt_checks and not m.exempt_checks


VARIANT_CASES = [
    ("rotary", {"dim": 16, "scaling": {"type": "proportional", "partial_rotary_factor": 0.25}}),
    ("rotary", {"dim": 16, "rotary_dim": 8, "rotary_features": "last"}),
    ("rotary", {"dim": 16, "layout": "interleaved", "direction": "negative"}),
    ("mrope", {"dim": 16, "rotary_dim": 8, "sections": (2, 1, 1), "interleaved": True}),
    ("mrope", {"dim": 16, "rotary_dim": 8, "sections": (2, 1, 1), "rotary_features": "last",
               "direction": "negative"}),
    ("mrope", {"dim": 16, "sections": (2, 3, 3), "pair_axes": (1, 2, 1, 2, 1, 2, 0, 0),
               "layout": "interleaved"}),
]


@parametrize_with_checks(VARIANT_CASES)
def test_conformance(case: Case) -> None:
    case.run()
