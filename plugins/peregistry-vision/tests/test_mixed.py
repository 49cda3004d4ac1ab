"""rope-mixed (Heo et al. 2024): the paper's formula in float64 NumPy with learned and axial
frequencies, the paper's initialization, float32-only accuracy, gradients, errors, timm's
``RotaryEmbeddingMixed`` when timm is installed (its ``layers/pos_embed_sincos.py`` loaded on its
own: ``import timm`` needs torchvision), and the conformance suite."""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import sys
import types
from typing import Any

import numpy as np
import pytest
from peregistry_vision import xy_positions

import peregistry as per
from peregistry.testing import Case, parametrize_with_checks
from peregistry.testing._core import selected_backends

SELECTED = [b.name for b in selected_backends()]
EPS = {"float16": 2.0**-10, "bfloat16": 2.0**-7, "float32": 2.0**-23, "float64": 2.0**-52}


def ref_mixed(x: np.ndarray, pos: np.ndarray, freqs: np.ndarray) -> np.ndarray:
    """The paper's eq. (RoPE-Mixed), pair by pair in float64: head h, pair j (features
    h·hd + 2j, h·hd + 2j + 1) turns by x·freqs[0, h, j] + y·freqs[1, h, j]."""
    x = np.asarray(x, dtype=np.float64)
    heads, half = freqs.shape[1], freqs.shape[2]
    hd = 2 * half
    px = np.broadcast_to(np.asarray(pos[0], dtype=np.float64), x.shape[:-1])
    py = np.broadcast_to(np.asarray(pos[1], dtype=np.float64), x.shape[:-1])
    out = x.copy()
    for h in range(heads):
        for j in range(half):
            a, b = h * hd + 2 * j, h * hd + 2 * j + 1
            ang = px * float(freqs[0, h, j]) + py * float(freqs[1, h, j])
            out[..., a] = x[..., a] * np.cos(ang) - x[..., b] * np.sin(ang)
            out[..., b] = x[..., a] * np.sin(ang) + x[..., b] * np.cos(ang)
    return out


def axial_freqs(heads: int, hd: int, temperature: float = 10.0) -> np.ndarray:
    """The init with every head's angle 0: f^x = [m, 0], f^y = [0, m]."""
    m = temperature ** (-4.0 * np.arange(hd // 4) / hd)
    z = np.zeros_like(m)
    fx = np.tile(np.concatenate([m, z]), (heads, 1))
    fy = np.tile(np.concatenate([z, m]), (heads, 1))
    return np.stack([fx, fy])


@pytest.mark.parametrize(("dim", "heads"), [(32, 2), (24, 3), (8, 1)])
def test_learned_frequencies_match_the_paper(backend: Any, wide: str, dim: int,
                                            heads: int) -> None:
    enc = per.get_encoder("rope-mixed", dim=dim, num_heads=heads)
    name = wide
    dt = backend.float_dtypes()[name]
    params = enc.init(backend.native(), seed=3, dtype=dt)
    freqs = np.asarray(backend.to_numpy(params["freqs"]), dtype=np.float64)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 49, dim))
    pos = xy_positions(7, 7)
    got = backend.to_numpy(enc.rotate(backend.from_numpy(x, dtype=dt),  # type: ignore[attr-defined]
                                      backend.from_numpy(pos), params=params))
    want = ref_mixed(x, pos, freqs)
    # float32-only: the compensated angle keeps ~1e-6; float64: a few ulps.
    tol = 64 * EPS[name] * np.abs(want).max() + (2e-6 if name == "float32" else 0.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    # cos_sin and tables with the same params
    cos, sin = (backend.to_numpy(t) for t in enc.cos_sin(backend.from_numpy(pos),  # type: ignore[attr-defined]
                                                          params=params))
    ang = pos[0][:, None] * freqs[0].reshape(-1) + pos[1][:, None] * freqs[1].reshape(-1)
    np.testing.assert_allclose(cos, np.repeat(np.cos(ang), 2, axis=-1), rtol=0, atol=tol)
    np.testing.assert_allclose(sin, np.repeat(np.sin(ang), 2, axis=-1), rtol=0, atol=tol)
    tables = enc.tables(backend.from_numpy(pos), params=params)  # type: ignore[attr-defined]
    np.testing.assert_array_equal(backend.to_numpy(tables.rotate(backend.from_numpy(x, dtype=dt))),
                                  got)


def test_without_params_is_axial_rope(backend: Any, wide: str) -> None:
    """params=None: the angle-0 init, RoPE-Axial = axial-rotary(dims=(hd/2, hd/2)) per head."""
    enc = per.get_encoder("rope-mixed", dim=24, num_heads=3, temperature=100.0)
    name = wide
    dt = backend.float_dtypes()[name]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 20, 24))
    pos = rng.integers(0, 30, size=(2, 20))
    xb, pb = backend.from_numpy(x, dtype=dt), backend.from_numpy(pos)
    got = backend.to_numpy(enc.rotate(xb, pb))  # type: ignore[attr-defined]
    want = ref_mixed(x, pos, axial_freqs(3, 8, 100.0))
    tol = 64 * EPS[name] * np.abs(want).max() + (2e-6 if name == "float32" else 0.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    axial = per.get_encoder("axial-rotary", dims=(4, 4), theta=100.0)
    for h in range(3):
        head = backend.to_numpy(axial.rotate(backend.from_numpy(x[..., 8 * h:8 * h + 8], dtype=dt),  # type: ignore[attr-defined]
                                             pb))
        np.testing.assert_allclose(got[..., 8 * h:8 * h + 8], head, rtol=0, atol=tol)
    # the same frequencies given as params take the learned path: the same rotation
    params = {"freqs": backend.from_numpy(axial_freqs(3, 8, 100.0), dtype=dt)}
    learned = backend.to_numpy(enc.rotate(xb, pb, params=params))  # type: ignore[attr-defined]
    np.testing.assert_allclose(learned, got, rtol=0, atol=tol)


def test_offset_with_params_equals_explicit_positions(backend: Any, wide: str) -> None:
    enc = per.get_encoder("rope-mixed", dim=16, num_heads=2)
    name = wide
    dt = backend.float_dtypes()[name]
    params = enc.init(backend.native(), seed=1, dtype=dt)
    xb = backend.from_numpy(np.random.default_rng(2).standard_normal((3, 5, 16)), dtype=dt)
    a = backend.to_numpy(enc.rotate(xb, offset=7, params=params))  # type: ignore[attr-defined]
    pos = np.stack([7 + np.arange(5)] * 2)
    b = backend.to_numpy(enc.rotate(xb, backend.from_numpy(pos), params=params))  # type: ignore[attr-defined]
    np.testing.assert_array_equal(a, b)


def test_init_is_the_papers() -> None:
    """Per head, f^x_j = m_k cos φ, f^y_j = m_k sin φ for j = k < hd/4 and φ + π/2 for the
    other half: magnitudes m_k = temperature^(-4k/hd), one angle per head, drawn in [0, 2π)."""
    enc = per.get_encoder("rope-mixed", dim=128, num_heads=4, temperature=10.0)  # head_dim 32
    f = np.asarray(enc.init(np, seed=5, dtype=np.float64)["freqs"])
    assert f.shape == (2, 4, 16)
    m = 10.0 ** (-4.0 * np.arange(8) / 32)
    first, second = f[:, :, :8], f[:, :, 8:]
    np.testing.assert_allclose(np.hypot(first[0], first[1]), np.broadcast_to(m, (4, 8)), rtol=1e-6)
    np.testing.assert_allclose(np.hypot(second[0], second[1]), np.broadcast_to(m, (4, 8)), rtol=1e-6)
    phi = np.arctan2(first[1], first[0])  # one angle per head, for every k
    np.testing.assert_allclose(phi, np.broadcast_to(phi[:, :1], phi.shape), atol=1e-6)
    np.testing.assert_allclose(np.cos(np.arctan2(second[1], second[0]) - phi), 0.0, atol=1e-6)
    assert len(set(np.round(phi[:, 0], 6))) == 4  # heads differ
    rng = np.random.default_rng(5)
    want = (rng.random((4, 1)) * 2 * math.pi + math.pi) % (2 * math.pi) - math.pi
    np.testing.assert_allclose(phi[:, :1], want, atol=1e-6)
    assert np.array_equal(f, f.astype(np.float32))  # float32-exact on every backend


def test_float32_angles_stay_accurate_with_large_frequencies(backend: Any) -> None:
    """Trained frequencies can grow: on float32-only backends (JAX without x64) the compensated
    angle stays within ~1e-6 where a plain float32 product is off by |θ|·eps (~1e-3 here)."""
    enc = per.get_encoder("rope-mixed", dim=8, num_heads=1)
    dt = backend.float_dtypes()["float32"]
    freqs = np.asarray(np.random.default_rng(3).uniform(-700, 700, size=(2, 1, 4)), np.float32)
    pos = np.stack(np.meshgrid(np.arange(14), np.arange(14))).reshape(2, -1)
    cos, sin = enc.cos_sin(backend.from_numpy(pos),  # type: ignore[attr-defined]
                           params={"freqs": backend.from_numpy(freqs, dtype=dt)})
    ang = (pos[0][:, None] * freqs[0].astype(np.float64).reshape(-1)
           + pos[1][:, None] * freqs[1].astype(np.float64).reshape(-1))
    np.testing.assert_allclose(backend.to_numpy(cos), np.repeat(np.cos(ang), 2, -1), atol=2e-6)
    np.testing.assert_allclose(backend.to_numpy(sin), np.repeat(np.sin(ang), 2, -1), atol=2e-6)


def test_torch_autograd_reaches_the_frequencies() -> None:
    if "torch" not in SELECTED:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    torch = pytest.importorskip("torch")
    enc = per.get_encoder("rope-mixed", dim=16, num_heads=2)
    freqs = enc.init(torch, seed=0, dtype=torch.float64)["freqs"].requires_grad_(True)
    x = torch.randn(1, 9, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    pos = torch.from_numpy(xy_positions(3, 3))
    out = enc.rotate(x, pos, params={"freqs": freqs})  # type: ignore[attr-defined]
    (out * out.detach().flip(-1)).sum().backward()
    assert freqs.grad is not None and freqs.grad.shape == (2, 2, 4)  # head_dim 8: 4 pairs
    assert float(freqs.grad.abs().sum()) > 0


def test_torch_encoder_module_trains_the_frequencies() -> None:
    """peregistry.torch.EncoderModule holds freqs as an nn.Parameter; forward rotates with it."""
    if "torch" not in SELECTED:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    torch = pytest.importorskip("torch")
    from peregistry.torch import EncoderModule

    enc = per.get_encoder("rope-mixed", dim=16, num_heads=2)
    module = EncoderModule(enc)
    assert [n for n, _ in module.named_parameters()] == ["params.freqs"]
    x = torch.randn(1, 9, 16, generator=torch.Generator().manual_seed(1))
    pos = torch.from_numpy(xy_positions(3, 3))
    out = module(x, pos)
    torch.testing.assert_close(out, enc.rotate(x, pos, params=enc.init(torch, seed=0)))  # type: ignore[attr-defined]
    out.square().sum().backward()
    assert module.params["freqs"].grad is not None


def test_bad_options_and_calls() -> None:
    with pytest.raises(ValueError, match=r"rope-mixed: option 'dim' must be num_heads \(3\) × "
                                         r"head_dim with head_dim a positive multiple of 4, got 16"):
        per.get_encoder("rope-mixed", dim=16, num_heads=3)
    with pytest.raises(ValueError, match=r"option 'dim' must be num_heads \(1\) × head_dim"):
        per.get_encoder("rope-mixed", dim=6)
    with pytest.raises(ValueError, match="option 'num_heads' must be a positive integer"):
        per.get_encoder("rope-mixed", dim=8, num_heads=0)
    enc = per.get_encoder("rope-mixed", dim=8)
    params = enc.init(np, seed=0)
    x = np.zeros((4, 8))
    with pytest.raises(ValueError, match=r"positions.shape=\(3, 4\), but should be \(2, \.\.\.\)"):
        enc.rotate(x, np.zeros((3, 4), dtype=np.int64), params=params)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="offset=2 is only used with positions=None"):
        enc.rotate(x, np.zeros((2, 4), dtype=np.int64), offset=2, params=params)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"params must have keys \['freqs'\]"):
        enc.rotate(x, np.zeros((2, 4), dtype=np.int64), params={"table": params["freqs"]})  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"params\['freqs'\].shape=\(2, 1, 2\), but should be "
                                         r"\(2, 1, 4\)"):
        enc.rotate(x, np.zeros((2, 4), dtype=np.int64), params={"freqs": np.zeros((2, 1, 2))})  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="dtype='int8' is not a real floating dtype"):
        enc.init(np, dtype="int8")


# -- timm's RotaryEmbeddingMixed --------------------------------------------------------------------
def _timm_sincos() -> Any:
    """timm's ``layers/pos_embed_sincos.py`` as a module of a stand-in package whose path is
    timm's ``layers`` directory: its relative imports (``_fx``, ``grid``, ``trace_utils``) load
    from there, and ``timm/__init__.py`` (which imports torchvision) never runs."""
    if "torch" not in SELECTED:
        pytest.skip("torch not selected by PEREGISTRY_BACKENDS")
    pytest.importorskip("torch")
    spec = importlib.util.find_spec("timm")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("timm is not installed")
    name = "_timm_layers_standalone"
    if name not in sys.modules:
        pkg = types.ModuleType(name)
        pkg.__path__ = [os.path.join(next(iter(spec.submodule_search_locations)), "layers")]
        sys.modules[name] = pkg
    return importlib.import_module(f"{name}.pos_embed_sincos")


@pytest.mark.parametrize(("dim", "heads", "grid"), [(64, 4, (7, 7)), (96, 2, (5, 9))])
def test_matches_timm_rotary_embedding_mixed(dim: int, heads: int, grid: tuple[int, int]) -> None:
    """timm's get_embed(grid)[block] applied with apply_rot_embed_cat to q (B, heads, N, hd)
    equals rope-mixed on the heads side by side, with params {"freqs": timm.freqs[:, block]} and
    positions xy_positions(H, W) (its grid_indexing='xy')."""
    import torch

    sincos = _timm_sincos()
    torch.manual_seed(0)
    ref = sincos.RotaryEmbeddingMixed(dim=dim, depth=2, num_heads=heads)
    h, w = grid
    emb = ref.get_embed([h, w])  # (depth, heads, N, 2·hd), float32 angles
    enc = per.get_encoder("rope-mixed", dim=dim, num_heads=heads)
    hd = dim // heads
    q = torch.randn(2, heads, h * w, hd, generator=torch.Generator().manual_seed(2))
    pos = torch.from_numpy(xy_positions(h, w))
    for block in range(2):
        want = sincos.apply_rot_embed_cat(q, emb[block])
        params = {"freqs": ref.freqs[:, block].detach()}
        side = q.transpose(1, 2).reshape(2, h * w, dim)
        got = enc.rotate(side, pos, params=params).reshape(2, h * w, heads, hd).transpose(1, 2)  # type: ignore[attr-defined]
        # timm's float32 angles x·f + y·f (|θ| <= ~20) drift by a few ulps of θ
        torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-5)


def test_timm_init_without_rotation_is_our_default() -> None:
    """timm's init_random_2d_freqs(rotate=False) is the angle-0 init: rope-mixed without params."""
    import torch

    sincos = _timm_sincos()
    f = sincos.init_random_2d_freqs(32, 1, 2, temperature=10.0, rotate=False, dtype=torch.float64)[:, 0]
    np.testing.assert_allclose(f.numpy(), axial_freqs(2, 32, 10.0), atol=1e-15)


# -- the conformance suite ------------------------------------------------------------------------
@parametrize_with_checks([("rope-mixed", {"dim": 32, "num_heads": 2}), ("rope-mixed", {"dim": 8})])
def test_conformance(case: Case) -> None:
    case.run()
