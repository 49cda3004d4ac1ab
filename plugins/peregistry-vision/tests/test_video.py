"""The video RoPEs (wan-rope, hunyuan-video-rope, cogvideox-rope): the formula in float64 NumPy on
every backend, diffusers 0.42.1's own classes and functions on torch where diffusers is installed
(Wan's float64-computed tables bit for bit, HunyuanVideo's and CogVideoX's float32 ones within a
bound derived from float32 rounding), the grids, the errors, and the conformance suite."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import math
import os
import types
from typing import Any

import numpy as np
import pytest
from peregistry_vision import cogvideox_crop_region, cogvideox_positions, video_positions

import peregistry as per
from peregistry.testing import Case, parametrize_with_checks
from peregistry.testing._core import selected_backends

SELECTED = [b.name for b in selected_backends()]
EPS = {"float32": 2.0**-23, "float64": 2.0**-52}
U32 = 2.0**-24  # float32 unit roundoff


# -- the formula, written out from the models' code -----------------------------------------------
def bands(name: str, opts: dict[str, Any]) -> tuple[int, int, int]:
    """(d_t, d_h, d_w) as each model's original code splits the head."""
    if name == "wan-rope":  # Wan2.1 wan/modules/model.py: d - 4*(d//6), 2*(d//6), 2*(d//6)
        d = opts.get("dim", 128)
        return d - 4 * (d // 6), 2 * (d // 6), 2 * (d // 6)
    if name == "cogvideox-rope":  # CogVideoX: time d/4, height and width 3d/8 each
        d = opts.get("dim", 64)
        return d // 4, 3 * d // 8, 3 * d // 8
    t, h, w = opts.get("rope_axes_dim", (16, 56, 56))
    return t, h, w


def default_theta(name: str) -> float:
    return 256.0 if name == "hunyuan-video-rope" else 10000.0


def ref_angles(pos: Any, dims: tuple[int, ...], theta: float) -> Any:
    """``p_a·θ^(-2j/d_a)`` per pair, axis t's band first: ``(*pos.shape[1:], sum(dims)/2)``."""
    p = np.asarray(pos, dtype=np.float64)
    parts = [p[a][..., None] * theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
             for a, d in enumerate(dims)]
    return np.concatenate(parts, axis=-1)


def ref_rotate(x: Any, pos: Any, dims: tuple[int, ...], theta: float) -> Any:
    """RoFormer's rotation of the pairs (2i, 2i+1) by the angles of :func:`ref_angles`."""
    x = np.asarray(x, dtype=np.float64)
    ang = ref_angles(pos, dims, theta)
    c, s = np.cos(ang), np.sin(ang)
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * c - x[..., 1::2] * s
    out[..., 1::2] = x[..., 0::2] * s + x[..., 1::2] * c
    return out


FORMULA_CASES = [
    ("wan-rope", {}),
    ("wan-rope", {"dim": 20, "theta": 500.0}),
    ("hunyuan-video-rope", {}),
    ("hunyuan-video-rope", {"rope_axes_dim": (4, 6, 10)}),
    ("cogvideox-rope", {}),
    ("cogvideox-rope", {"dim": 32}),
]


@pytest.mark.parametrize(("name", "opts"), FORMULA_CASES)
def test_matches_the_formula_in_float64(backend: Any, wide: str, name: str,
                                       opts: dict[str, Any]) -> None:
    """rotate and cos_sin at integer and real positions equal the formula in float64 NumPy."""
    enc: Any = per.get_encoder(name, **opts)
    dims, theta = bands(name, opts), float(opts.get("theta", default_theta(name)))
    assert enc.axes_dims == dims
    dim = sum(dims)
    dt = backend.float_dtypes()[wide]
    rng = np.random.default_rng(0)
    n = 40
    x = rng.standard_normal((2, 3, n, dim))
    for pos in (rng.integers(0, 1024, size=(3, n)),                 # as Wan's table reaches
                rng.uniform(0.0, 90.0, size=(3, n))):               # CogVideoX's linspace grid
        pb = backend.from_numpy(pos, dtype=dt) if pos.dtype.kind == "f" else backend.from_numpy(pos)
        got = backend.to_numpy(enc.rotate(backend.from_numpy(x, dtype=dt), pb))
        want = ref_rotate(x, pos, dims, theta)
        # float64: a few ulps of angles up to ~1000; float32-only (JAX without x64): the
        # range-reduced angles are good to ~1e-6 and the rotation rounds in float32.
        tol = (64 * EPS[wide] * 1024 * np.abs(x).max() if wide == "float64"
               else 1e-5 * np.abs(x).max())
        np.testing.assert_allclose(got, want, rtol=0, atol=tol)
        cos, sin = (backend.to_numpy(t) for t in enc.cos_sin(pb, dtype=dt))
        ang = np.repeat(ref_angles(pos, dims, theta), 2, axis=-1)  # interleaved [c0 c0 c1 c1 ..]
        np.testing.assert_allclose(cos, np.cos(ang), rtol=0, atol=tol)
        np.testing.assert_allclose(sin, np.sin(ang), rtol=0, atol=tol)


def test_hunyuan_video_is_axial_rope_with_theta_256() -> None:
    """The same rotation as axial-rotary(dims=rope_axes_dim, theta=256), interleaved (FLUX's
    EmbedND is this construction), up to the float64 rounding of 1/θ^x vs θ^-x."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 50, 128))
    pos = rng.integers(0, 200, size=(3, 50))
    video: Any = per.get_encoder("hunyuan-video-rope")
    axial: Any = per.get_encoder("axial-rotary", dims=(16, 56, 56), theta=256.0)
    a, b = video.rotate(x, pos), axial.rotate(x, pos)
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_per_axis_relative_law() -> None:
    """<R(P)q, R(P')k> depends only on the per-axis difference P - P' (each band is RoPE)."""
    rng = np.random.default_rng(2)
    for name in ("wan-rope", "hunyuan-video-rope", "cogvideox-rope"):
        enc: Any = per.get_encoder(name)
        dim = sum(enc.axes_dims)
        q, k = rng.standard_normal(dim), rng.standard_normal(dim)
        m, n = rng.integers(0, 100, size=(3, 1)), rng.integers(0, 100, size=(3, 1))
        shifts = rng.integers(0, 900, size=(3, 10))
        dots = np.sum(enc.rotate(np.tile(q, (10, 1)), m + shifts)
                      * enc.rotate(np.tile(k, (10, 1)), n + shifts), axis=-1)
        assert np.ptp(dots) < 1e-9


# -- grids and options ---------------------------------------------------------------------------
def test_video_positions_are_the_patch_grid_in_token_order() -> None:
    pos = video_positions(3, 5, 7, patch_size=(1, 2, 2))  # 3 x 2 x 3 patches
    assert pos.shape == (3, 18)
    assert pos.dtype == np.int64
    t, h, w = np.meshgrid(np.arange(3), np.arange(2), np.arange(3), indexing="ij")
    np.testing.assert_array_equal(pos, np.stack([t.ravel(), h.ravel(), w.ravel()]))
    with pytest.raises(ValueError, match=r"patch_size=\(1, 2\), but should be 3 positive"):
        video_positions(3, 4, 4, patch_size=(1, 2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\(num_frames, height, width\)=\(0, 4, 4\)"):
        video_positions(0, 4, 4)


def test_cogvideox_positions() -> None:
    crops = cogvideox_crop_region((30, 45), 90, 60)  # a 480 x 720 video: the training grid / 2
    assert crops == ((0, 0), (60, 90))
    pos = cogvideox_positions((30, 45), 13, crops_coords=crops)
    assert pos.shape == (3, 13 * 30 * 45)
    assert pos.dtype == np.float64
    grid = pos.reshape(3, 13, 30, 45)
    np.testing.assert_array_equal(grid[0, :, 0, 0], np.arange(13))
    np.testing.assert_allclose(grid[1, 0, :, 0], 2.0 * np.arange(30), atol=1e-12)  # 60/30
    np.testing.assert_allclose(grid[2, 0, 0, :], 2.0 * np.arange(45), atol=1e-12)  # 90/45
    # a wider grid is cropped: centred columns, stop scaled by (W-1)/W as diffusers does
    assert cogvideox_crop_region((60, 60), 90, 60) == ((0, 15), (60, 75))
    cols = cogvideox_positions((60, 60), 1, crops_coords=((0, 15), (60, 75)))[2, :60]
    np.testing.assert_allclose(cols, np.linspace(15.0, 75.0 * 59 / 60, 60), atol=1e-12)
    sliced = cogvideox_positions((30, 40), 4, grid_type="slice", max_size=(60, 90))
    assert sliced.dtype == np.int64
    np.testing.assert_array_equal(sliced, video_positions(4, 30, 40))
    with pytest.raises(ValueError, match=r"grid_type='grid', but should be 'linspace' or 'slice'"):
        cogvideox_positions((3, 4), 2, grid_type="grid")
    with pytest.raises(ValueError, match="crops_coords=None, but grid_type='linspace' needs"):
        cogvideox_positions((3, 4), 2)
    with pytest.raises(ValueError, match=r"crops_coords=\(0, 4\), but should be"):
        cogvideox_positions((3, 4), 2, crops_coords=(0, 4))
    with pytest.raises(ValueError, match="max_size=None, but grid_type='slice' needs"):
        cogvideox_positions((3, 4), 2, grid_type="slice")
    with pytest.raises(ValueError, match=r"grid_size=\(3, 100\) exceeds max_size=\(60, 90\)"):
        cogvideox_positions((3, 100), 2, grid_type="slice", max_size=(60, 90))
    with pytest.raises(ValueError, match=r"temporal_size=0, but should be a positive integer"):
        cogvideox_positions((3, 4), 0, grid_type="slice", max_size=(60, 90))


def test_options_are_validated_with_clear_errors() -> None:
    for dim in (7, 4):  # odd; or too small for the h and w bands (2·(dim // 6) each)
        with pytest.raises(ValueError, match=rf"wan-rope: option 'dim' must be an even integer "
                                             rf">= 6 \(below 6 .*\), got {dim}"):
            per.get_encoder("wan-rope", dim=dim)
    with pytest.raises(ValueError, match=r"cogvideox-rope: option 'dim' must be a positive "
                                         r"multiple of 16 .*, got 72"):
        per.get_encoder("cogvideox-rope", dim=72)
    with pytest.raises(ValueError, match=r"hunyuan-video-rope: option 'rope_axes_dim' must be "
                                         r"three positive even integers \(t, h, w\), got "
                                         r"\(16, 56\)"):
        per.get_encoder("hunyuan-video-rope", rope_axes_dim=(16, 56))
    with pytest.raises(ValueError, match=r"option 'theta' must be a finite number > 0 \(and "
                                         r"!= 1\), got 1.0"):
        per.get_encoder("hunyuan-video-rope", theta=1.0)
    with pytest.raises(TypeError, match="unknown"):
        per.get_encoder("wan-rope", patch_size=(1, 2, 2))
    enc: Any = per.get_encoder("wan-rope", dim=12)
    with pytest.raises(ValueError, match=r"positions.shape=\(2, 5\), but should be \(3, \.\.\.\): "
                                         r"one row per axis of \(t, h, w\) with 4, 4, 4 features"):
        enc.rotate(np.zeros((5, 12)), np.zeros((2, 5), dtype=np.int64))


def test_registered_through_the_entry_point_of_this_distribution() -> None:
    rows = {r.name: r for r in per.list_encoders()}
    for name in ("wan-rope", "hunyuan-video-rope", "cogvideox-rope"):
        assert rows[name].status == "ok"
        assert rows[name].kind == "rotary"
        assert rows[name].plugin.distribution == "peregistry-vision"


# -- diffusers 0.42.1 ----------------------------------------------------------------------------
DIFFUSERS_SKIP = ("diffusers is the reference implementation of these models (tox -e plugins "
                  "installs diffusers==0.42.1 without its dependencies); without it only the "
                  "formula checks run")


def _diffusers() -> Any:
    if "torch" not in SELECTED:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS (diffusers runs on torch)")
    pytest.importorskip("torch", reason="diffusers' models need torch")
    return pytest.importorskip("diffusers", reason=DIFFUSERS_SKIP)


def _wan_apply_rotary_emb() -> Any:
    """``apply_rotary_emb`` as Wan applies it: a function defined inside
    ``WanAttnProcessor.__call__`` (diffusers 0.42.1), rebuilt from its code object with the
    module's globals, so the test runs diffusers' own lines rather than a copy."""
    from diffusers.models.transformers import transformer_wan

    code = next(c for c in transformer_wan.WanAttnProcessor.__call__.__code__.co_consts
                if isinstance(c, types.CodeType) and c.co_name == "apply_rotary_emb")
    assert not code.co_freevars
    return types.FunctionType(code, vars(transformer_wan), "apply_rotary_emb")


def _diffusers_crop_region() -> Any:
    """``get_resize_crop_region_for_grid`` from diffusers' ``pipeline_cogvideox.py``, compiled on
    its own: importing the pipeline module imports transformers (T5), which the plugins env
    does not install."""
    spec = importlib.util.find_spec("diffusers")
    assert spec is not None and spec.submodule_search_locations
    path = os.path.join(next(iter(spec.submodule_search_locations)), "pipelines", "cogvideo",
                        "pipeline_cogvideox.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), filename=path)
    fn = next(node for node in tree.body if isinstance(node, ast.FunctionDef)
              and node.name == "get_resize_crop_region_for_grid")
    namespace: dict[str, Any] = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), namespace)
    return namespace["get_resize_crop_region_for_grid"]


def _np(t: Any) -> Any:
    """A torch tensor as float64 NumPy (bfloat16 is exact in float64)."""
    return t.double().numpy()


def f32_table_bound(angle: Any, base: float) -> Any:
    """How far diffusers' float32 ``cos``/``sin`` of ``θ = p·ω`` may be from the exact values
    rounded once to float32 (ours), per element, u = 2^-24: its ``ω = 1/base^(2j/d)`` in float32
    is off by (ln(base) + 3)·u relative (the exponent's rounding, magnified by ln base; pow 2u;
    the division u), the product p·ω by u, a ``torch.linspace`` float32 position by 2u, so
    ``|Δθ| <= (ln(base) + 6)·u·|θ|``; float32 cos/sin add 2u, our rounding u."""
    return (math.log(base) + 6) * U32 * np.abs(angle) + 3 * U32


def f32_rotate_bound(x: Any, table_bound: Any) -> Any:
    """Output feature 2i or 2i+1 mixes ``x_2i`` and ``x_2i+1``: the table error times their
    magnitudes, plus the float32 roundings of two products and a sum on each side (6u)."""
    pair = np.abs(x[..., 0::2]) + np.abs(x[..., 1::2])
    return np.repeat(pair, 2, axis=-1) * (table_bound + 6 * U32)


def test_wan_split_is_diffusers() -> None:
    _diffusers()
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    for d in (128, 64, 96, 20, 12, 6):
        ref = WanRotaryPosEmbed(d, (1, 2, 2), 16)
        enc: Any = per.get_encoder("wan-rope", dim=d)
        assert enc.axes_dims == (ref.t_dim, ref.h_dim, ref.w_dim)


@pytest.mark.parametrize("dim", [128, 64, 20])
def test_wan_tables_are_diffusers_bit_for_bit(dim: int) -> None:
    """WanRotaryPosEmbed computes its tables in float64 and rounds them to float32: our float32
    cos_sin is the same bits, over the whole table (positions 0..1023 on every axis) and for the
    grid of forward(hidden_states)."""
    _diffusers()
    import torch
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    ref: Any = WanRotaryPosEmbed(dim, (1, 2, 2), 1024)
    enc: Any = per.get_encoder("wan-rope", dim=dim)
    split = list(enc.axes_dims)
    cos_ax, sin_ax = ref.freqs_cos.split(split, dim=1), ref.freqs_sin.split(split, dim=1)
    pos = torch.from_numpy(np.random.default_rng(3).integers(0, 1024, size=(3, 4096)))
    want_cos = torch.cat([cos_ax[a][pos[a]] for a in range(3)], dim=-1)
    want_sin = torch.cat([sin_ax[a][pos[a]] for a in range(3)], dim=-1)
    cos, sin = enc.cos_sin(pos, dtype=torch.float32)
    assert torch.equal(cos, want_cos)
    assert torch.equal(sin, want_sin)
    # forward on a latent video (batch, channels, frames, height, width), patch (1, 2, 2)
    f_cos, f_sin = ref(torch.zeros(1, 1, 21, 30, 52))
    cos, sin = enc.cos_sin(torch.from_numpy(video_positions(21, 30, 52, patch_size=(1, 2, 2))),
                           dtype=torch.float32)
    assert torch.equal(cos, f_cos[0, :, 0])
    assert torch.equal(sin, f_sin[0, :, 0])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_wan_rotate_is_diffusers(dtype: str) -> None:
    """rotate(q) equals WanAttnProcessor's apply_rotary_emb on q (batch, seq, heads, head_dim)
    with the tables of forward: the same float32 arithmetic (x1·cos - x2·sin, x1·sin + x2·cos)
    and one rounding to q's dtype; a fused multiply-add may move an ulp."""
    _diffusers()
    import torch
    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    apply = _wan_apply_rotary_emb()
    ref = WanRotaryPosEmbed(128, (1, 2, 2), 1024)
    shape = (1, 16, 9, 14, 20)  # latent video: 9 frames of 14 x 20 -> 9 * 7 * 10 tokens
    f_cos, f_sin = ref(torch.zeros(shape))
    pos = torch.from_numpy(video_positions(*shape[2:], patch_size=(1, 2, 2)))
    dt = getattr(torch, dtype)
    q = torch.randn(2, pos.shape[1], 3, 128, generator=torch.Generator().manual_seed(4)).to(dt)
    want = apply(q, f_cos, f_sin)
    enc: Any = per.get_encoder("wan-rope")
    got = enc.rotate(q.transpose(1, 2), pos).transpose(1, 2)
    assert got.dtype == want.dtype
    g, w = _np(got), _np(want)
    tol = f32_rotate_bound(_np(q), 0.0)  # tables identical: rounding only
    if dtype == "bfloat16":
        # both round a float32 value to bfloat16 once (unit roundoff 2^-8): values δ apart may
        # round one bfloat16 ulp (<= 2^-7·|w|) apart
        tol = tol + 2.0**-7 * np.abs(w)
    assert np.all(np.abs(g - w) <= tol)


@pytest.mark.parametrize(("rope_axes_dim", "theta", "shape"), [
    ((16, 56, 56), 256.0, (1, 1, 33, 90, 160)),   # HunyuanVideo 720p: 33 x 45 x 80 patches
    ((8, 12, 12), 256.0, (1, 1, 9, 20, 14)),
    ((16, 56, 56), 10000.0, (1, 1, 5, 12, 12)),
])
def test_hunyuan_video_is_diffusers(rope_axes_dim: tuple[int, int, int], theta: float,
                                    shape: tuple[int, ...]) -> None:
    """HunyuanVideoRotaryPosEmbed(patch_size=2, patch_size_t=1).forward's float32 tables, and
    apply_rotary_emb(q, tables, sequence_dim=1) as its attention processor calls it, within
    the float32 bound (f32_table_bound); our float64 tables are within it too."""
    _diffusers()
    import torch
    from diffusers.models.embeddings import apply_rotary_emb
    from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoRotaryPosEmbed

    ref = HunyuanVideoRotaryPosEmbed(2, 1, list(rope_axes_dim), theta)
    want_cos, want_sin = ref(torch.zeros(shape))
    pos_np = video_positions(*shape[2:], patch_size=(1, 2, 2))
    pos = torch.from_numpy(pos_np)
    enc: Any = per.get_encoder("hunyuan-video-rope", rope_axes_dim=rope_axes_dim, theta=theta)
    ang = np.repeat(ref_angles(pos_np, rope_axes_dim, theta), 2, axis=-1)
    bound = f32_table_bound(ang, theta)
    for dt in (torch.float32, torch.float64):
        cos, sin = enc.cos_sin(pos, dtype=dt)
        assert np.all(np.abs(_np(cos) - _np(want_cos)) <= bound)
        assert np.all(np.abs(_np(sin) - _np(want_sin)) <= bound)
    _check_rotate(enc, pos, pos_np, (want_cos, want_sin), bound, heads_axis=2,
                  apply=lambda q, t: apply_rotary_emb(q, t, sequence_dim=1))


@pytest.mark.parametrize(("grid", "frames"), [((30, 45), 13), ((60, 90), 13), ((60, 60), 7),
                                              ((24, 90), 4)])
def test_cogvideox_linspace_is_diffusers(grid: tuple[int, int], frames: int) -> None:
    """CogVideoX 1.0: get_3d_rotary_pos_embed(64, crops_coords, grid, T) with the pipeline's
    crops (get_resize_crop_region_for_grid, training grid 60 x 90), tables and
    apply_rotary_emb(q, tables) on (batch, heads, seq, 64), within the float32 bound."""
    _diffusers()
    from diffusers.models.embeddings import get_3d_rotary_pos_embed

    crops = _diffusers_crop_region()(grid, 90, 60)
    assert cogvideox_crop_region(grid, 90, 60) == crops
    tables: Any = get_3d_rotary_pos_embed(64, crops, grid, frames)
    pos_np = cogvideox_positions(grid, frames, crops_coords=crops)
    _check_cogvideox(pos_np, tables)


@pytest.mark.parametrize(("grid", "frames", "dim"), [((60, 90), 7, 64), ((34, 50), 3, 64),
                                                     ((20, 30), 2, 32)])
def test_cogvideox_slice_is_diffusers(grid: tuple[int, int], frames: int, dim: int) -> None:
    """CogVideoX 1.5: get_3d_rotary_pos_embed(..., grid_type='slice', max_size=(60, 90))."""
    _diffusers()
    from diffusers.models.embeddings import get_3d_rotary_pos_embed

    tables: Any = get_3d_rotary_pos_embed(dim, None, grid, frames, grid_type="slice",
                                          max_size=(60, 90))
    pos_np = cogvideox_positions(grid, frames, grid_type="slice", max_size=(60, 90))
    _check_cogvideox(pos_np, tables, dim=dim)


def _check_cogvideox(pos_np: Any, tables: tuple[Any, Any], *, dim: int = 64) -> None:
    import torch
    from diffusers.models.embeddings import apply_rotary_emb

    enc: Any = per.get_encoder("cogvideox-rope", dim=dim)
    pos = torch.from_numpy(pos_np)
    ang = np.repeat(ref_angles(pos_np, enc.axes_dims, 10000.0), 2, axis=-1)
    bound = f32_table_bound(ang, 10000.0)
    for dt in (torch.float32, torch.float64):
        cos, sin = enc.cos_sin(pos, dtype=dt)
        assert np.all(np.abs(_np(cos) - _np(tables[0])) <= bound)
        assert np.all(np.abs(_np(sin) - _np(tables[1])) <= bound)
    _check_rotate(enc, pos, pos_np, tables, bound, heads_axis=1,
                  apply=apply_rotary_emb)


def _check_rotate(enc: Any, pos: Any, pos_np: Any, tables: tuple[Any, Any], bound: Any, *,
                  heads_axis: int, apply: Any) -> None:
    """rotate(q) vs diffusers' apply on q with the heads on ``heads_axis`` (1: (batch, heads,
    seq, dim); 2: (batch, seq, heads, dim)), float32 and bfloat16, on at most 4096 of the tokens
    (a seeded sample: the tables were compared whole)."""
    import torch

    dim = int(tables[0].shape[-1])
    seq = int(pos_np.shape[1])
    if seq > 4096:
        keep = np.sort(np.random.default_rng(6).choice(seq, size=4096, replace=False))
        idx = torch.from_numpy(keep)
        pos, pos_np, bound, seq = pos[:, idx], pos_np[:, keep], bound[keep], 4096
        tables = (tables[0][idx], tables[1][idx])
    shape = (2, 3, seq, dim) if heads_axis == 1 else (2, seq, 3, dim)
    q32 = torch.randn(*shape, generator=torch.Generator().manual_seed(5))
    for dt in (torch.float32, torch.bfloat16):
        q = q32.to(dt)
        want = apply(q, tables)
        assert want.dtype == dt
        if heads_axis == 2:  # compare as (batch, heads, seq, dim): bound is (seq, dim)
            q, want = q.transpose(1, 2), want.transpose(1, 2)
        got = enc.rotate(q, pos)
        assert got.dtype == dt
        g, w = _np(got), _np(want)
        tol = f32_rotate_bound(_np(q), bound)
        if dt == torch.bfloat16:
            tol = tol + 2.0**-7 * np.abs(w)  # one bfloat16 ulp: see test_wan_rotate_is_diffusers
        worst = float(np.max(np.abs(g - w) - tol))
        assert worst <= 0, f"{dt}: rotate differs from diffusers beyond the bound by {worst:.3g}"


# -- the conformance suite ------------------------------------------------------------------------
@parametrize_with_checks([
    ("wan-rope", {}),
    ("wan-rope", {"dim": 20}),
    ("hunyuan-video-rope", {}),
    ("hunyuan-video-rope", {"rope_axes_dim": (4, 6, 6)}),
    ("cogvideox-rope", {}),
    ("cogvideox-rope", {"dim": 32}),
])
def test_conformance(case: Case) -> None:
    case.run()
