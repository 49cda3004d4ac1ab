"""HunYuan-VL's XD-RoPE: ``mrope`` with ``feature_axes`` (a pair's two features may turn with
different axes) against Hugging Face's rule written out here in float64 NumPy, transformers 5.23's
own ``HunYuanVLRotaryEmbedding`` and ``apply_rotary_pos_emb``, ``rotary`` on text tokens, every
backend's compiler, and the conformance suite (with the two laws it breaks declared exempt)."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import pytest
from conftest import BACKENDS

import peregistry as per
from peregistry.testing import Case, check_encoder, parametrize_with_checks


def hunyuan_axes(sections: tuple[int, ...]) -> tuple[int, ...]:
    """HF recomposition_frequencies: chunk k of the full width, 2·sections[k] features, axis k."""
    return tuple(k for k, s in enumerate(sections) for _ in range(2 * s))


#: A HunyuanOCR-like head (4 axes: position, width, height, image index) at small size, the
#: interleaved layout with the negative direction, and partial rotary on the last features
#: with a scaling and a 3-axis map whose chunks do not fall on pair boundaries.
CONFIGS = [
    ("mrope", {"dim": 32, "sections": (4, 4, 4, 4), "feature_axes": hunyuan_axes((4, 4, 4, 4))}),
    ("mrope", {"dim": 16, "sections": (2, 3, 3), "feature_axes": hunyuan_axes((2, 3, 3)),
               "layout": "interleaved", "direction": "negative", "theta": 1e6}),
    ("mrope", {"dim": 40, "rotary_dim": 24, "sections": (3, 5, 4),
               "feature_axes": hunyuan_axes((3, 5, 4)), "rotary_features": "last",
               "scaling": {"type": "linear", "factor": 2.0}}),
]


@parametrize_with_checks(CONFIGS)
def test_conformance(case: Case) -> None:
    case.run()


def test_check_encoder_passes_on_every_selected_backend() -> None:
    report = check_encoder("mrope", **CONFIGS[0][1])
    assert not report.failures, str(report)
    exempt = {r.check for r in report.rows if r.status == "exempt"}
    assert exempt == {"check_mrope_relative_per_axis"}


def reference_tables(pos: Any, dim: int, theta: float, sections: tuple[int, ...],
                     scale: float = 1.0) -> tuple[Any, Any]:
    """Hugging Face's HunYuan-VL tables in float64: per-axis angles ``pos[a]·ω`` (``pos`` is
    ``(axes, ...)``), ``cat(freqs, freqs)``, chunk k of ``2·sections[k]`` features from axis
    k; ``scale`` divides the positions (linear scaling)."""
    omega = theta ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)
    freqs = np.asarray(pos, dtype=np.float64)[..., None] / scale * omega  # (axes, ..., dim/2)
    full = np.concatenate([freqs, freqs], axis=-1)
    chunks, start = [], 0
    for k, s in enumerate(sections):
        chunks.append(full[k, ..., start:start + 2 * s])
        start += 2 * s
    angle = np.concatenate(chunks, axis=-1)
    return np.cos(angle), np.sin(angle)


def reference_rotate(x: Any, pos: Any, dim: int, theta: float, sections: tuple[int, ...], *,
                     layout: str = "half", sign: float = 1.0) -> Any:
    """``x·cos + rotate_half(x)·sin`` with :func:`reference_tables` (HF's apply_rotary_pos_emb),
    in float64; ``layout="interleaved"`` puts pair i's features at (2i, 2i+1) instead of
    (i, i + dim/2), the tables following them."""
    cos, sin = reference_tables(pos, dim, theta, sections)
    sin = sign * sin
    h = dim // 2
    if layout == "interleaved":
        perm = np.empty(dim, dtype=np.int64)
        perm[0::2], perm[1::2] = np.arange(h), np.arange(h) + h
        inv = np.argsort(perm)
        return reference_rotate(x[..., inv], pos, dim, theta, sections, sign=sign)[..., perm]
    x = np.asarray(x, dtype=np.float64)
    rot = np.concatenate([-x[..., h:], x[..., :h]], axis=-1)
    return x * cos + rot * sin


EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "bfloat16": 2.0**-8, "float16": 2.0**-11}


def _wide(backend: Any) -> tuple[str, float]:
    name = "float64" if "float64" in backend.float_dtypes() else "float32"
    return name, float(np.finfo(np.dtype(name)).eps)


@pytest.mark.parametrize(("sections", "layout", "sign"), [
    ((4, 4, 4, 4), "half", 1.0), ((2, 3, 3), "half", 1.0), ((3, 1, 2, 2), "interleaved", -1.0)])
def test_matches_float64_formula_on_every_backend(backend: Any, sections: tuple[int, ...],
                                                  layout: str, sign: float) -> None:
    dim = 2 * sum(sections)
    enc = per.get_encoder("mrope", dim=dim, sections=sections, layout=layout,
                          feature_axes=hunyuan_axes(sections),
                          direction="negative" if sign < 0 else "positive")
    rng = np.random.default_rng(0)
    pos = rng.integers(0, 3000, size=(len(sections), 2, 1, 9))
    x = rng.standard_normal((2, 3, 9, dim))
    name, eps = _wide(backend)
    dt = backend.float_dtypes()[name]
    got = backend.to_numpy(enc.rotate(backend.from_numpy(x, dtype=dt), backend.from_numpy(pos)))
    want = reference_rotate(x, pos, dim, 1e4, sections, layout=layout, sign=sign)
    # each angle p·ω is off by up to ~p·eps (p < 3000), times |x|
    tol = 16 * eps * 3000 * float(np.abs(x).max())
    np.testing.assert_allclose(got, want, atol=tol, rtol=0)
    assert np.abs(got - reference_rotate(x, pos, dim, 1e4, sections, layout=layout,
                                         sign=-sign)).max() > max(10 * tol, 0.5)  # sign seen
    # the public tables: each feature's own cos/sin, in the layout's feature order
    cos, sin = (backend.to_numpy(t) for t in enc.cos_sin(backend.from_numpy(pos[:, :, 0]),
                                                          dtype=dt))
    want_cos, want_sin = reference_tables(pos[:, :, 0], dim, 1e4, sections)
    if layout == "interleaved":
        perm = np.empty(dim, dtype=np.int64)
        perm[0::2], perm[1::2] = np.arange(dim // 2), np.arange(dim // 2) + dim // 2
        want_cos, want_sin = want_cos[..., perm], want_sin[..., perm]
    np.testing.assert_allclose(cos, want_cos, atol=16 * eps * 3000, rtol=0)
    np.testing.assert_allclose(sin, sign * want_sin, atol=16 * eps * 3000, rtol=0)


def test_partial_rotary_last_with_linear_scaling_matches_the_formula() -> None:
    sections, dim, rd = (3, 5, 4), 40, 24
    enc = per.get_encoder("mrope", **CONFIGS[2][1])
    rng = np.random.default_rng(1)
    pos = rng.integers(0, 3000, size=(3, 7))
    x = rng.standard_normal((2, 7, dim))
    cos, sin = reference_tables(pos, rd, 1e4, sections, scale=2.0)
    xr = x[..., dim - rd:]
    rot = np.concatenate([-xr[..., rd // 2:], xr[..., :rd // 2]], axis=-1)
    want = np.concatenate([x[..., :dim - rd], xr * cos + rot * sin], axis=-1)
    np.testing.assert_allclose(enc.rotate(x, pos), want, atol=1e-10, rtol=0)


def test_text_tokens_equal_rotary_bit_for_bit(backend: Any) -> None:
    """Every axis at one position: RoPE exactly, explicit positions and offsets (the position
    table's rows), in every float dtype."""
    sections = (4, 4, 4, 4)
    enc = per.get_encoder("mrope", dim=32, sections=sections, feature_axes=hunyuan_axes(sections),
                          theta=1e6)
    rope = enc.text_equivalent()
    assert rope == per.get_encoder("rotary", dim=32, theta=1e6)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 17, 32))
    p = rng.integers(0, 5000, size=(2, 1, 17))
    for name, dt in backend.float_dtypes().items():
        xb = backend.from_numpy(x, dtype=dt)
        for kw_ours, kw_rope in (({"offset": 4090}, {"offset": 4090}),
                                 ({"positions": backend.from_numpy(np.stack([p] * 4))},
                                  {"positions": backend.from_numpy(p)})):
            a = backend.to_numpy(enc.rotate(xb, **kw_ours))
            b = backend.to_numpy(rope.rotate(xb, **kw_rope))
            np.testing.assert_array_equal(a, b, err_msg=f"{name} {sorted(kw_ours)}")


def test_norms_and_the_per_axis_law_break_where_axes_differ() -> None:
    """What the two exemptions say: with the axes at different positions a pair's length
    changes and <R(P)q, R(P')k> changes under a common per-axis shift; Hugging Face's model
    does the same (the formula above)."""
    sections = (4, 4, 4, 4)
    enc = per.get_encoder("mrope", dim=32, sections=sections, feature_axes=hunyuan_axes(sections))
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 32))
    pos = rng.integers(0, 3000, size=(4, 5))
    out = enc.rotate(x, pos)
    assert np.abs(np.linalg.norm(out, axis=-1) - np.linalg.norm(x, axis=-1)).max() > 1e-2
    q, k = x[:1], x[1:2]
    m, n = pos[:, :1], pos[:, 1:2]
    shift = np.asarray([[0], [100], [7], [2000]])
    dot = np.sum(enc.rotate(q, m) * enc.rotate(k, n))
    moved = np.sum(enc.rotate(q, m + shift) * enc.rotate(k, n + shift))
    assert abs(dot - moved) > 1e-3


@pytest.mark.parametrize("options", [
    {"dim": 16, "layout": "interleaved"},
    {"dim": 22, "rotary_dim": 16, "rotary_features": "last", "direction": "negative"}])
def test_tables_rotate_bit_for_bit(backend: Any, options: dict[str, Any]) -> None:
    sections = (2, 3, 3)
    enc = per.get_encoder("mrope", sections=sections, feature_axes=hunyuan_axes(sections),
                          **options)
    dim = options["dim"]
    rng = np.random.default_rng(4)
    pos = backend.from_numpy(rng.integers(0, 3000, size=(3, 2, 1, 6)))
    tables = enc.tables(pos)
    assert "SplitRotaryTables" in repr(tables)
    for name, dt in backend.float_dtypes().items():
        q = backend.from_numpy(rng.standard_normal((2, 4, 6, dim)), dtype=dt)
        k = backend.from_numpy(rng.standard_normal((2, 1, 6, dim)), dtype=dt)
        want = [backend.to_numpy(enc.rotate(t, pos)) for t in (q, k)]
        again = backend.to_numpy(enc.rotate(q, pos))  # the same call: the tables it kept
        got = [backend.to_numpy(t) for t in tables.rotate_all(q, k)]
        for g, w in zip([*got, again], [*want, want[0]], strict=True):
            np.testing.assert_array_equal(g, w, err_msg=name)


def test_native_paths_match_the_generic_rotation(backend: Any) -> None:
    sections = (4, 4, 4, 4)
    enc: Any = per.get_encoder("mrope", dim=32, sections=sections,
                               feature_axes=hunyuan_axes(sections))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 3, 5, 32))
    pb = backend.from_numpy(rng.integers(0, 3000, size=(4, 2, 1, 5)))
    for name, dt in backend.float_dtypes().items():
        xb = backend.from_numpy(x, dtype=dt)
        fast = backend.to_numpy(enc._rotate(xb, pb, offset=0, params=None, seq_len=None,
                                            native=True))
        ref = backend.to_numpy(enc._rotate(xb, pb, offset=0, params=None, seq_len=None,
                                           native=False))
        # the framework paths are the generic rotation bit for bit; both round once from
        # float32 or wider, and fused multiply-adds may move one ulp
        tol = 2 * EPS[name] * float(np.abs(ref).max())
        assert float(np.abs(fast - ref).max()) <= tol, name


def test_under_the_backend_compiler_with_distinct_axes(backend: Any) -> None:
    """jax.jit / torch.compile(fullgraph=True): one trace for new values of one shape, the eager
    result, no warnings; image-like positions (every axis its own)."""
    sections = (4, 4, 4, 4)
    enc = per.get_encoder("mrope", dim=32, sections=sections, feature_axes=hunyuan_axes(sections))

    def fn(x: Any, pos: Any) -> Any:
        return enc.rotate(x, pos) + enc.tables(pos).rotate(x) + enc.rotate(x, offset=3)

    compiled, traces = backend.jit_counted(fn)
    if compiled is None:
        pytest.skip(f"{backend.name} has no compiler")
    rng = np.random.default_rng(6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            x = backend.from_numpy(rng.standard_normal((2, 5, 32)),
                                   dtype=backend.float_dtypes()["float32"])
            pos = backend.from_numpy(rng.integers(0, 3000, size=(4, 5)))
            out = compiled(x, pos)
    assert traces() == 1
    want = backend.to_numpy(fn(x, pos))
    np.testing.assert_allclose(backend.to_numpy(out), want, atol=64 * 2.0**-23 * 4, rtol=0)


@pytest.mark.parametrize(("options", "pattern"), [
    ({"feature_axes": (0,) * 8 + (1,) * 4 + (2,) * 4, "pair_axes": (0, 0, 0, 0, 1, 1, 2, 2)},
     r"option 'feature_axes' must be None when pair_axes=\(0, 0, 0, 0, 1, 1, 2, 2\)"),
    ({"sections": (4, 2, 2), "interleaved": True, "feature_axes": (0,) * 8 + (1,) * 4 + (2,) * 4},
     r"option 'feature_axes' must be None when interleaved=True"),
    ({"feature_axes": (0,) * 8 + (1,) * 4 + (2,) * 3},
     r"option 'feature_axes' must be None or 16 axis indices .* appearing 2·sections\[a\] "
     r"times \(\(8, 4, 4\); they appear \(8, 4, 3\)\)"),
    ({"feature_axes": (0,) * 8 + (1,) * 4 + (2,) * 3 + (3,)}, r"in 0 \.\. 2"),
    ({"feature_axes": (0,) * 8 + (1,) * 4 + (2,) * 3 + (-1,)},
     r"option 'feature_axes' must be None or one axis index per rotated feature"),
    ({"feature_axes": (0,) * 8 + (1,) * 8}, r"they appear \(8, 8, 0\)"),
])
def test_bad_feature_axes(options: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ValueError, match=pattern):
        per.get_encoder("mrope", **{"dim": 16, "sections": (4, 2, 2), **options})


def test_feature_axes_without_a_split_pair_is_pair_axes() -> None:
    """Each pair's two features on one axis: exactly pair_axes, and normalised to it."""
    pair = (0, 1, 0, 2, 0, 1, 0, 2)
    enc = per.get_encoder("mrope", dim=16, sections=(4, 2, 2), feature_axes=pair + pair)
    assert enc == per.get_encoder("mrope", dim=16, sections=(4, 2, 2), pair_axes=pair)
    assert enc.options["feature_axes"] is None and not enc.exempt_checks


# -- Hugging Face transformers 5.23 ---------------------------------------------------------------
HF = pytest.mark.skipif("torch" not in BACKENDS,
                        reason="compared with transformers in the torch env")


def _hf(sections: list[int], dim: int, **rope: Any) -> tuple[Any, Any, Any]:
    """HF's text config, rotary module and apply function for these sections."""
    pytest.importorskip("transformers", reason="transformers is the reference in the torch env")
    from transformers.models.hunyuan_vl import modeling_hunyuan_vl as mod
    from transformers.models.hunyuan_vl.configuration_hunyuan_vl import HunYuanVLTextConfig

    cfg = HunYuanVLTextConfig(head_dim=dim, rope_parameters={
        "rope_type": "default", "rope_theta": 1e4, "mrope_section": sections, **rope})
    return cfg, mod.HunYuanVLRotaryEmbedding(cfg), mod.apply_rotary_pos_emb


@HF
@pytest.mark.parametrize("sections", [[16, 16, 16, 16], [20, 22, 22], [5, 3, 4, 4]])
def test_recomposition_matches_hugging_face_bit_for_bit(sections: list[int]) -> None:
    """HF's recomposition of NumPy's float64 cos/sin of our own angles (so that only where each
    value goes may differ) is our float64 cos_sin exactly; HF's apply with our float32 tables
    is our rotate exactly, in float32, bfloat16 and float16."""
    import torch

    dim = 2 * sum(sections)
    _, rotary, apply = _hf(sections, dim)
    enc: Any = per.get_encoder("mrope", dim=dim, sections=tuple(sections),
                               feature_axes=hunyuan_axes(tuple(sections)))
    pos = np.random.default_rng(7).integers(0, 5000, size=(len(sections), 2, 7))
    angles = pos[..., None] * enc.inv_freq()
    cos, sin = enc.cos_sin(pos, dtype=np.float64)
    for ours, fn in ((cos, np.cos), (sin, np.sin)):
        theirs = rotary.recomposition_frequencies(torch.from_numpy(fn(angles))).numpy()
        np.testing.assert_array_equal(ours, theirs)
    gen = torch.Generator().manual_seed(0)
    tpos = torch.from_numpy(pos)
    c32, s32 = enc.cos_sin(tpos, dtype=torch.float32)
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        q = torch.randn(2, 4, 7, dim, generator=gen).to(dt)
        hq, _ = apply(q, q, c32, s32)
        assert torch.equal(enc.rotate(q, tpos[:, :, None, :]), hq), dt


@HF
@pytest.mark.parametrize(("sections", "alpha"), [([16, 16, 16, 16], 1000.0), ([8, 12, 12], None)])
def test_from_hf_config_matches_the_hunyuan_vl_model(sections: list[int],
                                                     alpha: float | None) -> None:
    """from_hf_config's encoder against HF's own rotary module and apply function (float32
    angles there), with HunyuanOCR's fixed NTK alpha and without; the tables too."""
    import torch

    dim = 2 * sum(sections)
    rope = {"rope_type": "dynamic", "alpha": alpha, "factor": 1.0} if alpha else {}
    cfg, rotary, apply = _hf(sections, dim, **rope)
    enc: Any = per.from_hf_config(cfg)
    assert enc.options["feature_axes"] == hunyuan_axes(tuple(sections))
    gen = torch.Generator().manual_seed(1)
    seq = 40
    q = torch.randn(1, 2, seq, dim, generator=gen)
    pos = torch.randint(0, 4 * seq, (len(sections), 1, seq), generator=gen)
    with torch.no_grad():
        cos, sin = rotary(q, pos)
        theirs, _ = apply(q, q, cos, sin)
    eps = float(np.finfo(np.float32).eps)
    tol = 8 * eps * 4 * seq  # HF's float32 angles: off by ~eps·position
    our_cos, our_sin = enc.cos_sin(pos, dtype=torch.float32)
    assert float((our_cos - cos).abs().max()) <= tol
    assert float((our_sin - sin).abs().max()) <= tol
    err = float((enc.rotate(q, pos[:, :, None, :]) - theirs).abs().max())
    assert err <= tol * float(q.abs().max()) * 2, err
    # the controls: Qwen2-VL's bands of pairs with the same sections, and the unstretched
    # base, are far off
    bands = per.get_encoder("mrope", **{**enc.options, "feature_axes": None})
    assert float((bands.rotate(q, pos[:, :, None, :]) - theirs).abs().max()) > 100 * err
    if alpha:
        plain = per.get_encoder("mrope", **{**enc.options, "theta": 1e4})
        assert float((plain.rotate(q, pos[:, :, None, :]) - theirs).abs().max()) > 100 * err
