"""Scaling types of the serving engines (issue 46) against their engine's code re-derived in
float64 NumPy, independently of peregistry's: the frequencies (``_compute_inv_freq``), the cache
(``_compute_cos_sin_cache``: ``cos(t·ω)·mscale``, ``sin(t·ω)·mscale``) and vLLM's
``RotaryEmbedding.forward_native`` (``vllm/model_executor/layers/rotary_embedding/base.py``,
``common.py``: ``x1·cos - x2·sin``, ``x2·cos + x1·sin`` on the first ``rotary_dim`` features,
NeoX halves or GPT-J pairs). Sources, vLLM ``vllm/model_executor/layers/rotary_embedding/``:

* ``ntk_scaling_rope.py`` at 03587f55 (``NTKScalingRotaryEmbedding``), dispatched by
  ``get_rope`` (``__init__.py``) for ``rope_type == "ntk"`` with ``factor`` and ``mixed_b``.
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


def forward_native(x: A, positions: A, inv_freq: A, rotary_dim: int, *, neox: bool,
                   mscale: float = 1.0) -> A:
    """The cache rows of ``positions`` (``cos``/``sin`` of ``t·ω`` times ``mscale``) applied to
    ``x`` ``(..., seq, head_size)``: ``apply_rotary_emb`` on ``x[..., :rotary_dim]``."""
    freqs = np.einsum("i,j -> ij", positions.astype(np.float64), inv_freq)
    cos, sin = np.cos(freqs) * mscale, np.sin(freqs) * mscale
    rot, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if neox:
        x1, x2 = rot[..., : rotary_dim // 2], rot[..., rotary_dim // 2:]
    else:
        x1, x2 = rot[..., ::2], rot[..., 1::2]
    o1, o2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    out = (np.concatenate((o1, o2), axis=-1) if neox
           else np.stack((o1, o2), axis=-1).reshape(rot.shape))
    return np.concatenate((out, rest), axis=-1)


# -- the branches --------------------------------------------------------------------------------
#: (id, scaling, oracle frequencies of (theta, rotary_dim), oracle mscale)
BRANCHES: list[tuple[str, dict[str, Any], Any, float]] = [
    ("ntk-fixed", {"type": "ntk", "factor": 4.0},
     lambda th, d: ntk_inv_freq(th, d, 4.0, None), 1.0),
    ("ntk-mixed", {"type": "ntk", "factor": 8.0, "mixed_b": 0.625},
     lambda th, d: ntk_inv_freq(th, d, 8.0, 0.625), 1.0),
    ("ntk-mixed-b2", {"type": "ntk", "factor": 2.5, "mixed_b": 2.0},
     lambda th, d: ntk_inv_freq(th, d, 2.5, 2.0), 1.0),
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


CASES = [("rotary", {"dim": 16, "scaling": {"type": "ntk", "factor": 4.0}}),
         ("rotary", {"dim": 24, "rotary_dim": 16, "layout": "interleaved",
                     "scaling": {"type": "ntk", "factor": 8.0, "mixed_b": 0.625}})]


@parametrize_with_checks(CASES)
def test_conformance(case: Case) -> None:
    case.run()
