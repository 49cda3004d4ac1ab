"""peregistry-vision's own tests: the conformance suite in two lines, and each encoder against
its reference formula written out in NumPy (MAE, FLUX EmbedND, DETR PositionEmbeddingSine)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from peregistry_vision import grid_positions

import peregistry as per
from peregistry.testing import Case, parametrize_with_checks

CASES = [
    ("axial-rotary", {"dims": (4, 6, 6)}),
    ("axial-rotary", {"dims": (8, 8), "layout": "half"}),
    ("axial-rotary", {"dims": (6,), "dim": 10}),
    ("sincos-2d", {"dim": 16}),
    ("detr-sine", {"num_pos_feats": 8}),
    ("detr-sine", {"num_pos_feats": 6, "normalize": True, "height": 7, "width": 9}),
]


@parametrize_with_checks(CASES)
def test_conformance(case: Case) -> None:
    case.run()


def test_registered_through_the_entry_point_of_this_distribution() -> None:
    rows = {r.name: r for r in per.list_encoders()}
    for name in ("axial-rotary", "sincos-2d", "detr-sine"):
        assert rows[name].status == "ok"
        assert rows[name].plugin.distribution == "peregistry-vision"


# -- MAE ------------------------------------------------------------------------------------------
def mae_2d_sincos(embed_dim: int, h: int, w: int) -> Any:
    """facebookresearch/mae util/pos_embed.py, written out (float64)."""

    def one_d(d: int, pos: Any) -> Any:
        omega = np.arange(d // 2, dtype=np.float64) / (d / 2.0)
        omega = 1.0 / 10000**omega
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    grid = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))  # w first
    grid = np.stack(grid, axis=0).reshape(2, 1, h, w)
    emb_h = one_d(embed_dim // 2, grid[0])
    emb_w = one_d(embed_dim // 2, grid[1])
    return np.concatenate([emb_h, emb_w], axis=1)  # (h*w, D)


@pytest.mark.parametrize(("dim", "h", "w"), [(16, 4, 4), (32, 3, 5), (8, 1, 7)])
def test_sincos_2d_is_mae(dim: int, h: int, w: int) -> None:
    enc = per.get_encoder("sincos-2d", dim=dim)
    got = enc.encode(grid_positions(h, w), dtype=np.float64).reshape(h * w, dim)
    np.testing.assert_allclose(got, mae_2d_sincos(dim, h, w), atol=1e-12)


def test_sincos_2d_rejects_dim_not_multiple_of_4_and_flat_positions() -> None:
    with pytest.raises(ValueError, match="dim"):
        per.get_encoder("sincos-2d", dim=6)
    with pytest.raises(ValueError, match=r"should be \(\.\.\., 2\)"):
        per.get_encoder("sincos-2d", dim=8).encode(np.arange(5))


# -- FLUX EmbedND ---------------------------------------------------------------------------------
def flux_rope(ids: Any, axes_dim: tuple[int, ...], theta: float) -> Any:
    """FLUX ``EmbedND``: per axis ``rope(pos, d, theta)`` (2x2 rotation matrices), concatenated
    over the axes; ids ``(n, n_axes)`` -> ``(n, sum(d)/2, 2, 2)``."""
    mats = []
    for a, d in enumerate(axes_dim):
        scale = np.arange(0, d, 2, dtype=np.float64) / d
        omega = 1.0 / theta**scale
        out = np.einsum("n,d->nd", ids[:, a].astype(np.float64), omega)
        m = np.stack([np.cos(out), -np.sin(out), np.sin(out), np.cos(out)], axis=-1)
        mats.append(m.reshape(*out.shape, 2, 2))
    return np.concatenate(mats, axis=-3)


def flux_apply_rope(x: Any, freqs_cis: Any) -> Any:
    """FLUX ``apply_rope``: pairs (2i, 2i+1) times the rotation matrices."""
    x_ = x.reshape(*x.shape[:-1], -1, 1, 2)
    out = freqs_cis[..., 0] * x_[..., 0] + freqs_cis[..., 1] * x_[..., 1]
    return out.reshape(x.shape)


@pytest.mark.parametrize("axes_dim", [(16, 56, 56), (4, 6, 6), (8, 8)])
def test_axial_rotary_is_flux_embednd(axes_dim: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    n = 12
    ids = rng.integers(0, 64, size=(n, len(axes_dim)))
    x = rng.standard_normal((2, n, sum(axes_dim)))
    enc = per.get_encoder("axial-rotary", dims=axes_dim, theta=10000.0)
    got = enc.rotate(x, ids.T)  # positions are (num_axes, seq)
    want = flux_apply_rope(x, flux_rope(ids, axes_dim, 10000.0))
    np.testing.assert_allclose(got, want, atol=1e-12)


def test_axial_rotary_is_relative_per_axis() -> None:
    rng = np.random.default_rng(1)
    enc = per.get_encoder("axial-rotary", dims=(4, 6, 6), layout="half")
    q, k = rng.standard_normal(16), rng.standard_normal(16)
    m = rng.integers(0, 500, size=(3, 1))
    n = rng.integers(0, 500, size=(3, 1))
    shifts = rng.integers(0, 3000, size=(3, 10))
    rq = enc.rotate(np.tile(q, (10, 1)), m + shifts)
    rk = enc.rotate(np.tile(k, (10, 1)), n + shifts)
    dots = np.sum(rq * rk, axis=-1)
    assert np.ptp(dots) < 1e-9


def test_axial_rotary_partial_features_pass_through_and_options_are_checked() -> None:
    enc = per.get_encoder("axial-rotary", dims=(4, 4), dim=12)
    x = np.random.default_rng(2).standard_normal((5, 12))
    out = enc.rotate(x, np.stack([np.arange(5), np.arange(5) * 2]))
    np.testing.assert_array_equal(out[:, 8:], x[:, 8:])
    with pytest.raises(ValueError, match=r"dims"):
        per.get_encoder("axial-rotary", dims=(4, 3))
    with pytest.raises(ValueError, match=r"sum\(dims\) = 8"):
        per.get_encoder("axial-rotary", dims=(4, 4), dim=6)
    with pytest.raises(ValueError, match=r"should be \(2, \.\.\.\)"):
        enc.rotate(x, np.arange(5))


# -- DETR PositionEmbeddingSine -------------------------------------------------------------------
def detr_sine(mask: Any, num_pos_feats: int, temperature: float, normalize: bool,
              scale: float) -> Any:
    """DETR models/position_encoding.py PositionEmbeddingSine.forward, in NumPy float64:
    mask (b, h, w) True at padding -> (b, 2·num_pos_feats, h, w)."""
    not_mask = ~mask
    y_embed = np.cumsum(not_mask, axis=1, dtype=np.float64)
    x_embed = np.cumsum(not_mask, axis=2, dtype=np.float64)
    if normalize:
        eps = 1e-6
        y_embed = y_embed / (y_embed[:, -1:, :] + eps) * scale
        x_embed = x_embed / (x_embed[:, :, -1:] + eps) * scale
    dim_t = np.arange(num_pos_feats, dtype=np.float64)
    dim_t = temperature ** (2 * (dim_t // 2) / num_pos_feats)
    pos_x = x_embed[:, :, :, None] / dim_t
    pos_y = y_embed[:, :, :, None] / dim_t
    pos_x = np.stack((np.sin(pos_x[..., 0::2]), np.cos(pos_x[..., 1::2])), axis=4)
    pos_y = np.stack((np.sin(pos_y[..., 0::2]), np.cos(pos_y[..., 1::2])), axis=4)
    pos_x = pos_x.reshape(*pos_x.shape[:3], -1)
    pos_y = pos_y.reshape(*pos_y.shape[:3], -1)
    return np.concatenate((pos_y, pos_x), axis=3).transpose(0, 3, 1, 2)


@pytest.mark.parametrize("normalize", [False, True])
def test_detr_sine_is_detr(normalize: bool) -> None:
    h, w, f = 5, 7, 16
    opts: dict[str, Any] = {"num_pos_feats": f, "normalize": normalize}
    if normalize:
        opts.update(height=h, width=w)
    enc = per.get_encoder("detr-sine", **opts)
    got = enc.encode(grid_positions(h, w), dtype=np.float64)  # (h, w, 2f)
    want = detr_sine(np.zeros((1, h, w), dtype=bool), f, 10000.0, normalize, 2 * math.pi)[0]
    np.testing.assert_allclose(np.moveaxis(got, -1, 0), want, atol=1e-12)


def test_detr_sine_options_follow_detr() -> None:
    with pytest.raises(ValueError, match="normalize should be True if scale is passed"):
        per.get_encoder("detr-sine", scale=1.0)
    with pytest.raises(ValueError, match="height"):
        per.get_encoder("detr-sine", normalize=True, width=4)
    enc = per.get_encoder("detr-sine", num_pos_feats=4, normalize=True, height=2, width=2,
                          scale=1.0)
    assert enc.out_dim == 8
