"""The rotary encoder: an independent float64 NumPy RoPE, Hugging Face (Llama/GPT-NeoX
``apply_rotary_pos_emb``, GPT-J ``rotate_every_two``) when transformers is installed, accuracy at
2**20 on every backend, narrow dtypes, jit, errors, and the conformance suite."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry.backends._torch import COMPILE_BACKEND_ENV
from peregistry.testing import Case, parametrize_with_checks
from peregistry.testing._core import EPS, selected_backends

SELECTED = [b.name for b in selected_backends()]


def needs(name: str) -> Any:
    """Skip unless backend ``name`` is selected (PEREGISTRY_BACKENDS) and importable."""
    if name not in SELECTED:
        pytest.skip(f"backend {name} not selected by PEREGISTRY_BACKENDS")
    return pytest.importorskip(name, reason=f"{name} is not installed")


# -- an independent float64 reference (RoFormer eq. 34, one pair at a time) -----------------------
def ref_rotate(x: np.ndarray, pos: np.ndarray, *, theta: float = 10000.0, rd: int | None = None,
               interleaved: bool = False, inv: np.ndarray | None = None,
               af: float = 1.0) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    d = x.shape[-1]
    rd = d if rd is None else rd
    if inv is None:
        inv = np.array([theta ** (-2.0 * i / rd) for i in range(rd // 2)])
    pos = np.broadcast_to(np.asarray(pos, dtype=np.float64), x.shape[:-1])
    out = x.copy()
    for i in range(rd // 2):
        ia, ib = (2 * i, 2 * i + 1) if interleaved else (i, i + rd // 2)
        ang = pos * inv[i]
        a, b = x[..., ia], x[..., ib]
        out[..., ia] = af * (a * np.cos(ang) - b * np.sin(ang))
        out[..., ib] = af * (a * np.sin(ang) + b * np.cos(ang))
    return out


def _wide(backend: Any) -> str:
    return "float64" if "float64" in backend.float_dtypes() else "float32"


def _arr(backend: Any, a: Any, dtype: str | None = None) -> Any:
    target = None if dtype is None else backend.float_dtypes()[dtype]
    return backend.from_numpy(np.asarray(a), dtype=target)


LAYOUTS = [
    {"dim": 16},
    {"dim": 16, "layout": "interleaved"},
    {"dim": 24, "rotary_dim": 8},
    {"dim": 24, "rotary_dim": 8, "layout": "interleaved", "theta": 500000.0},
]


@pytest.mark.parametrize("options", LAYOUTS, ids=lambda o: "-".join(f"{k}{v}" for k, v in o.items()))
def test_matches_independent_reference(backend: Any, options: dict[str, Any]) -> None:
    enc = per.get_encoder("rotary", **options)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 5, options["dim"]))
    pos = rng.integers(0, 5000, size=(2, 1, 5))
    name = _wide(backend)
    got = backend.to_numpy(enc.rotate(_arr(backend, x, name), _arr(backend, pos)))
    want = ref_rotate(x, pos, theta=options.get("theta", 1e4), rd=options.get("rotary_dim"),
                      interleaved=options.get("layout") == "interleaved")
    # float32-only backends: exact angle reduction leaves ~1e-6 rad; products add a few ulps.
    tol = 16 * EPS[name] * np.abs(want).max() + (4e-6 if name == "float32" else 0.0)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


def test_positions_none_and_offset(backend: Any) -> None:
    enc = per.get_encoder("rotary", dim=8)
    x = np.random.default_rng(1).standard_normal((3, 4, 8))
    name = _wide(backend)
    xb = _arr(backend, x, name)
    for o in (0, 17):
        a = backend.to_numpy(enc.rotate(xb, offset=o))
        b = backend.to_numpy(enc.rotate(xb, _arr(backend, o + np.arange(4))))
        np.testing.assert_array_equal(a, b)
        np.testing.assert_allclose(a, ref_rotate(x, o + np.arange(4)), rtol=0,
                                   atol=64 * EPS[name] * 4)
    # an array offset per batch row: (3, 1) + arange(4) -> (3, 4)
    off = np.array([[0], [5], [9]])
    got = backend.to_numpy(enc.rotate(xb, offset=_arr(backend, off)))
    np.testing.assert_allclose(got, ref_rotate(x, off + np.arange(4)), rtol=0,
                               atol=64 * EPS[name] * 4)


def test_cos_sin_layout_and_attention_factor(backend: Any) -> None:
    name = _wide(backend)
    wide = backend.float_dtypes()[name]
    pos = np.array([0, 1, 7])
    enc = per.get_encoder("rotary", dim=8)
    cos, sin = (backend.to_numpy(t) for t in enc.cos_sin(_arr(backend, pos), dtype=wide))  # type: ignore[attr-defined]
    ang = pos[:, None] * np.array([1e4 ** (-2 * i / 8) for i in range(4)])
    tol = 8 * EPS[name] + (2e-6 if name == "float32" else 0)
    np.testing.assert_allclose(cos, np.cos(np.concatenate([ang, ang], -1)), atol=tol, rtol=0)
    np.testing.assert_allclose(sin, np.sin(np.concatenate([ang, ang], -1)), atol=tol, rtol=0)
    inter = enc.replace(layout="interleaved")
    c2, _ = (backend.to_numpy(t) for t in inter.cos_sin(_arr(backend, pos), dtype=wide))  # type: ignore[attr-defined]
    np.testing.assert_allclose(c2, np.repeat(np.cos(ang), 2, axis=-1), atol=tol, rtol=0)
    yarn = per.get_encoder("rotary", dim=8, scaling={"type": "yarn", "factor": 4.0,
                                                     "original_max_position_embeddings": 64})
    c3, s3 = (backend.to_numpy(t) for t in yarn.cos_sin(_arr(backend, pos), dtype=wide))  # type: ignore[attr-defined]
    np.testing.assert_allclose(np.sqrt(c3**2 + s3**2), 0.1 * math.log(4) + 1, rtol=4 * EPS[name]
                               + (2e-6 if name == "float32" else 0))


def test_cos_sin_dtype(backend: Any) -> None:
    enc = per.get_encoder("rotary", dim=8, rotary_dim=4)
    for name, dt in backend.float_dtypes().items():
        cos, sin = enc.cos_sin(_arr(backend, np.arange(3)), dtype=dt)  # type: ignore[attr-defined]
        assert cos.dtype == dt and sin.dtype == dt, name
        assert tuple(cos.shape) == (3, 4)
    cos, _ = enc.cos_sin(_arr(backend, np.arange(3)))  # type: ignore[attr-defined]
    assert cos.dtype == backend.default_float_dtype()


@pytest.mark.parametrize("scaling", [
    None,
    {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8192},
    {"type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 1.0,
     "mscale_all_dim": 1.0},
], ids=["plain", "llama3", "yarn"])
def test_accurate_at_two_to_the_twenty(backend: Any, scaling: dict[str, Any] | None) -> None:
    """Angles and tables within 1e-5 at positions up to 2**20 in float32, on every backend
    (JAX without x64 and array-api-strict's no_float64 device included)."""
    enc = per.get_encoder("rotary", dim=128, theta=500000.0, scaling=scaling)
    pos = np.array([2**20, 2**20 - 1, 2**20 - 12345, 999_999, 3])
    inv = enc.inv_freq()  # type: ignore[attr-defined]
    af = enc.attention_factor  # type: ignore[attr-defined]
    ang = pos[:, None].astype(np.float64) * inv  # exact enough: float64 angles, error ~1e-10
    want_c = af * np.cos(np.concatenate([ang, ang], -1))
    want_s = af * np.sin(np.concatenate([ang, ang], -1))
    for device in backend.test_devices():
        p = backend.from_numpy(pos, device=device)
        cos, sin = enc.cos_sin(p, dtype=backend.float_dtypes()["float32"])  # type: ignore[attr-defined]
        np.testing.assert_allclose(backend.to_numpy(cos), want_c, atol=1e-5, rtol=0)
        np.testing.assert_allclose(backend.to_numpy(sin), want_s, atol=1e-5, rtol=0)
        x = np.random.default_rng(2).standard_normal((5, 128))
        got = backend.to_numpy(enc.rotate(backend.from_numpy(
            x, dtype=backend.float_dtypes()["float32"], device=device), p))
        want = ref_rotate(x.astype(np.float32), pos, inv=inv, af=af)
        np.testing.assert_allclose(got, want, atol=1e-5 * np.abs(x).max() * 4, rtol=0)


def test_narrow_dtypes_rotate_in_float32_and_cast_once(backend: Any) -> None:
    narrow = [n for n in ("bfloat16", "float16") if n in backend.float_dtypes()]
    if not narrow:
        pytest.skip(f"{backend.name} has no bfloat16/float16")
    enc = per.get_encoder("rotary", dim=64, rotary_dim=48)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 7, 64))
    pos = rng.integers(0, 2**16, size=(7,))
    for name in narrow:
        xb = _arr(backend, x, name)
        x_exact = backend.to_numpy(xb).astype(np.float64)  # the values actually passed in
        out = enc.rotate(xb, _arr(backend, pos))
        assert out.dtype == backend.float_dtypes()[name]
        got = backend.to_numpy(out).astype(np.float64)
        want = ref_rotate(x_exact, pos, rd=48)
        # one rounding to the narrow dtype (half an ulp) of the float32 result, whose own
        # error (float32 angles: ~1e-6 rad on float32-only backends) is far below that ulp
        ulp = EPS[name] * 2.0 ** np.floor(np.log2(np.maximum(np.abs(want), 1e-30)))
        f32_err = 4e-6 * np.abs(x_exact).max()
        assert np.all(np.abs(got - want) <= 0.5 * ulp + f32_err), name
        np.testing.assert_array_equal(got[..., 48:], x_exact[..., 48:])


def test_inputs_not_mutated_and_real_positions(backend: Any) -> None:
    enc = per.get_encoder("rotary", dim=8, layout="interleaved")
    name = _wide(backend)
    x = np.random.default_rng(4).standard_normal((4, 8))
    xb = _arr(backend, x, name)
    before = backend.to_numpy(xb).copy()
    out = backend.to_numpy(enc.rotate(xb, _arr(backend, np.array([0.5, 1.25, 2.0, 3.0]))))
    np.testing.assert_array_equal(backend.to_numpy(xb), before)
    want = ref_rotate(x, np.array([0.5, 1.25, 2.0, 3.0]), interleaved=True)
    np.testing.assert_allclose(out, want, atol=64 * EPS[name] + 4e-6 * (name == "float32"))


# -- scalings that depend on the sequence length --------------------------------------------------
DYNAMIC = {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64}
LONGROPE = {"type": "longrope", "short_factor": [1.0] * 8,
            "long_factor": [1.0 + i for i in range(8)],
            "original_max_position_embeddings": 64, "factor": 4.0}


@pytest.mark.parametrize("scaling", [DYNAMIC, LONGROPE], ids=["dynamic", "longrope"])
def test_seq_len_default_is_max_position_plus_one(backend: Any, scaling: dict[str, Any]) -> None:
    enc = per.get_encoder("rotary", dim=16, scaling=scaling)
    name = _wide(backend)
    x = _arr(backend, np.random.default_rng(5).standard_normal((2, 10, 16)), name)
    for last in (30, 63, 64, 200):
        pos = _arr(backend, np.arange(last - 9, last + 1))
        implicit = backend.to_numpy(enc.rotate(x, pos))
        explicit = backend.to_numpy(enc.rotate(x, pos, seq_len=last + 1))
        np.testing.assert_array_equal(implicit, explicit)
        # positions=None: seq_len = offset + seq, known without reading data
        np.testing.assert_array_equal(backend.to_numpy(enc.rotate(x, offset=last - 9)), explicit)
    short = enc.rotate(x, _arr(backend, np.arange(10)), seq_len=64)
    long = enc.rotate(x, _arr(backend, np.arange(10)), seq_len=65)
    assert not np.allclose(backend.to_numpy(short), backend.to_numpy(long))


def test_jax_jit_with_seq_len_dependent_scalings() -> None:
    jax = needs("jax")
    import jax.numpy as jnp

    x = jnp.asarray(np.random.default_rng(6).standard_normal((2, 10, 16)), dtype=jnp.float32)
    lr = per.get_encoder("rotary", dim=16, scaling=LONGROPE)
    f = jax.jit(lambda x, p: lr.rotate(x, p))  # type: ignore[attr-defined]
    for last in (40, 100):  # short, then long factors: selected on device, one trace
        p = jnp.arange(last - 9, last + 1)
        np.testing.assert_allclose(np.asarray(f(x, p)), np.asarray(lr.rotate(x, p)),  # type: ignore[attr-defined]
                                   atol=1e-5)
    dyn = per.get_encoder("rotary", dim=16, scaling=DYNAMIC)
    g = jax.jit(lambda x, p: dyn.rotate(x, p, seq_len=200))  # type: ignore[attr-defined]
    p = jnp.arange(190, 200)
    np.testing.assert_allclose(np.asarray(g(x, p)), np.asarray(dyn.rotate(x, p)), atol=1e-5)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"depends on the sequence length.*pass seq_len="):
        jax.jit(lambda x, p: dyn.rotate(x, p))(x, p)  # type: ignore[attr-defined]
    h = jax.jit(lambda x: dyn.rotate(x, offset=190))  # type: ignore[attr-defined]
    np.testing.assert_allclose(np.asarray(h(x)), np.asarray(dyn.rotate(x, p)), atol=1e-5)  # type: ignore[attr-defined]


# -- Hugging Face ---------------------------------------------------------------------------------
def _hf() -> Any:
    needs("torch")
    return pytest.importorskip("transformers",
                               reason="transformers is not installed (the reference model code)")


def test_bit_for_bit_with_hf_apply_rotary_pos_emb_given_the_same_tables() -> None:
    """Llama/GPT-NeoX ``q·cos + rotate_half(q)·sin`` in float32, fed our ``cos_sin``: equal
    bit for bit (the same two products and sum)."""
    _hf()
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    enc = per.get_encoder("rotary", dim=64, theta=500000.0)
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 9, 64, generator=g)
    k = torch.randn(2, 2, 9, 64, generator=g)
    pos = torch.arange(100, 109).expand(2, 9)
    cos, sin = enc.cos_sin(pos, dtype=torch.float32)  # type: ignore[attr-defined]
    hq, hk = apply_rotary_pos_emb(q, k, cos, sin)
    # the generic Array API rotation: the same two products and sum, bit for bit
    generic = enc._rotate(q, pos[:, None, :], offset=0, params=None,  # type: ignore[attr-defined]
                          seq_len=None, native=False)
    assert torch.equal(generic, hq)
    # and torch's eager fast path too
    assert torch.equal(enc.rotate(q, pos[:, None, :]), hq)  # type: ignore[attr-defined]
    assert torch.equal(enc.rotate(k, offset=100), hk)  # type: ignore[attr-defined]


HF_MODELS = [
    ("llama2", {"dim": 128}, {"rope_type": "default"}, 4096),
    ("llama3.1", {"dim": 128, "theta": 500000.0,
                  "scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192}}, None, 131072),
    ("yarn", {"dim": 64, "scaling": {"type": "yarn", "factor": 4.0,
                                     "original_max_position_embeddings": 2048}}, None, 8192),
    ("linear", {"dim": 64, "scaling": {"type": "linear", "factor": 2.0}}, None, 4096),
    ("neox-partial", {"dim": 64, "rotary_dim": 16}, {"rope_type": "default"}, 2048),
]


@pytest.mark.parametrize(("model", "options", "hf", "max_pos"), HF_MODELS,
                         ids=[m[0] for m in HF_MODELS])
def test_matches_hf_llama_rotary_embedding(model: str, options: dict[str, Any],
                                           hf: dict[str, Any] | None, max_pos: int) -> None:
    """Our rotate vs Hugging Face's LlamaRotaryEmbedding + apply_rotary_pos_emb in float32.
    HF forms angles in float32 (error ~ p·ulp), we in float64: they agree to that error."""
    transformers = _hf()
    import torch
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
    )

    dim = options["dim"]
    rd = options.get("rotary_dim", dim)
    params = dict(hf) if hf is not None else {
        ("rope_type" if k == "type" else k): v for k, v in options["scaling"].items()}
    params["rope_theta"] = options.get("theta", 10000.0)
    # Llama's default RoPE ignores partial_rotary_factor; GPT-NeoX's rotates rd = rotary_pct·dim
    # features with frequencies over rd, i.e. Llama's formula with head_dim=rd.
    config = transformers.LlamaConfig(hidden_size=rd * 4, num_attention_heads=4, head_dim=rd,
                                      max_position_embeddings=max_pos, rope_parameters=params)
    rope = LlamaRotaryEmbedding(config)
    enc = per.get_encoder("rotary", **options)
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 12, dim, generator=g)
    pos = torch.arange(1000, 1012)[None]
    cos, sin = rope(q, pos)
    if rd != dim:  # HF's partial rotary: rotate the first rd features, pass the rest
        qr, qp = q[..., :rd], q[..., rd:]
        hq = torch.cat((apply_rotary_pos_emb(qr, qr, cos, sin)[0], qp), dim=-1)
    else:
        hq, _ = apply_rotary_pos_emb(q, q, cos, sin)
    ours = enc.rotate(q, pos[:, None, :])  # type: ignore[attr-defined]
    ref = torch.from_numpy(ref_rotate(q.double().numpy(), pos[:, None, :].numpy(), rd=rd,
                                      inv=enc.inv_freq(), af=enc.attention_factor))  # type: ignore[attr-defined]
    # HF's angle error: float32 p times float32 inv_freq, ~ 2 ulp(p·ω) ≈ 2·eps·1012 rad
    tol_hf = 4 * EPS["float32"] * 1012 * float(q.abs().max()) * enc.attention_factor  # type: ignore[attr-defined]
    assert float((ours - hq).abs().max()) <= tol_hf
    assert float((ours.double() - ref).abs().max()) <= 8 * EPS["float32"] * float(ref.abs().max())
    # ours is the more accurate one
    assert float((ours.double() - ref).abs().max()) <= float((hq.double() - ref).abs().max())


def test_interleaved_matches_gptj() -> None:
    _hf()
    import torch
    from transformers.models.gptj.modeling_gptj import (
        apply_rotary_pos_emb,
        create_sinusoidal_positions,
    )

    dim, rd = 256, 64  # GPT-J-6B: head 256, rotary_dim 64
    enc = per.get_encoder("rotary", dim=dim, rotary_dim=rd, layout="interleaved")
    table = create_sinusoidal_positions(2048, rd)  # [sin | cos], float32
    pos = torch.arange(5, 15)[None]
    sincos = table[pos]
    sin, cos = torch.split(sincos, rd // 2, dim=-1)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(1, 10, 4, dim, generator=g)  # GPT-J: (batch, seq, heads, head_dim)
    xr = apply_rotary_pos_emb(x[..., :rd], sin, cos)
    want = torch.cat((xr, x[..., rd:]), dim=-1)
    got = enc.rotate(x.transpose(1, 2), pos[:, None, :]).transpose(1, 2)  # type: ignore[attr-defined]
    assert float((got - want).abs().max()) <= 64 * EPS["float32"] * float(x.abs().max())


# -- torch specifics ------------------------------------------------------------------------------
def test_torch_fast_path_with_autograd_and_noncontiguous() -> None:
    torch = needs("torch")
    enc = per.get_encoder("rotary", dim=32, rotary_dim=16)
    x = torch.randn(2, 6, 3, 32, dtype=torch.float64,
                    generator=torch.Generator().manual_seed(0)).transpose(1, 2)  # non-contiguous
    x.requires_grad_(True)
    out = enc.rotate(x)  # type: ignore[attr-defined]
    out.sum().backward()
    ref = ref_rotate(x.detach().numpy(), np.arange(6), rd=16)
    np.testing.assert_allclose(out.detach().numpy(), ref, atol=1e-13)
    assert x.grad is not None and x.grad.shape == x.shape
    with torch.no_grad():
        np.testing.assert_allclose(enc.rotate(x).numpy(), ref, atol=1e-13)  # type: ignore[attr-defined]


def test_torch_compile_fullgraph_no_warnings_no_recompile(monkeypatch: pytest.MonkeyPatch) -> None:
    """One inductor graph (C++ codegen), warnings as errors, new values do not recompile."""
    torch = needs("torch")
    from torch._dynamo.testing import CompileCounterWithBackend

    from peregistry.backends._torch import _import_inductor_quietly

    _import_inductor_quietly()  # torch 2.13's own import-time DeprecationWarning, see there
    torch._dynamo.reset()
    enc = per.get_encoder("rotary", dim=64, scaling={
        "type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512})
    counter = CompileCounterWithBackend("inductor")
    # One eager call first: the registry's type -> backend cache is filled on first sight of a
    # tensor type, and a fill seen while tracing makes Dynamo compile a second time.
    enc.rotate(torch.zeros(1, 64))  # type: ignore[attr-defined]

    @torch.compile(fullgraph=True, backend=counter)
    def f(q: Any, k: Any, pos: Any) -> Any:
        return enc.rotate(q, pos), enc.rotate(k, offset=3)  # type: ignore[attr-defined]

    gen = torch.Generator().manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for i in range(3):
            q = torch.randn(2, 4, 8, 64, dtype=torch.bfloat16, generator=gen)
            k = torch.randn(2, 1, 8, 64, dtype=torch.bfloat16, generator=gen)
            pos = torch.arange(i, i + 8)
            oq, _ = f(q, k, pos)
            assert oq.dtype == torch.bfloat16
    assert counter.frame_count == 1
    want = enc.rotate(q, pos)  # type: ignore[attr-defined]
    assert float((oq.float() - want.float()).abs().max()) <= EPS["bfloat16"] * 8


# -- bad input ------------------------------------------------------------------------------------
@pytest.mark.parametrize(("options", "exc", "pattern"), [
    ({"dim": 63}, ValueError, "option 'dim' must be a positive even integer <= 65536, got 63"),
    ({"dim": 64, "rotary_dim": 31}, ValueError,
     "option 'rotary_dim' must be None (= dim) or a positive even integer <= dim, got 31"),
    ({"dim": 64, "rotary_dim": 128}, ValueError,
     "option 'rotary_dim' must be None (= dim) or a positive even integer <= dim (64), got 128"),
    ({"dim": 64, "layout": "neox"}, ValueError,
     "option 'layout' must be one of 'half', 'interleaved', got 'neox'"),
    ({"dim": 64, "theta": 1.0}, ValueError, "option 'theta' must be a finite number > 0"),
    ({"dim": 64, "scaling": {"type": "bogus"}}, ValueError,
     "unknown scaling type 'bogus'. Known types: axial, deepseek-yarn, default, dynamic, grok1, linear, "
     "llama3, longrope, ntk, proportional, telechat3-yarn, yarn"),
    ({"dim": 64, "scaling": {"type": "linear"}}, ValueError,
     "scaling 'linear' is missing required parameter 'factor'"),
    ({"dim": 64, "scaling": {"type": "linear", "factor": 2.0, "beta": 1}}, ValueError,
     "scaling 'linear' has no parameter 'beta'"),
    ({"dim": 64, "scaling": "linear"}, TypeError, "option 'scaling' must be None or a dict"),
])
def test_bad_options(options: dict[str, Any], exc: type[Exception], pattern: str) -> None:
    with pytest.raises(exc) as info:
        per.get_encoder("rotary", **options)
    assert pattern in str(info.value)
    assert str(info.value).startswith("rotary: ")


def test_bad_calls(backend: Any) -> None:
    enc = per.get_encoder("rotary", dim=8)
    name = _wide(backend)
    x = _arr(backend, np.zeros((2, 3, 8)), name)
    with pytest.raises(ValueError, match=r"x.shape=\(2, 3, 6\), but x.shape\[-1\] should be "
                                         r"dim=8"):
        enc.rotate(_arr(backend, np.zeros((2, 3, 6)), name))  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"positions of shape \(4,\) do not broadcast against "
                                         r"x.shape\[:-1\]=\(2, 3\)"):
        enc.rotate(x, _arr(backend, np.arange(4)))  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"positions of shape \(5, 2, 3\) do not broadcast"):
        enc.rotate(x, _arr(backend, np.zeros((5, 2, 3), dtype=np.int64)))  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="offset=2 is only used with positions=None"):
        enc.rotate(x, _arr(backend, np.arange(3)), offset=2)  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="offset must be an int, a real number or an "
                                        "integer/real array, got '2'"):
        enc.rotate(x, offset="2")  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="x must have a real floating dtype"):
        enc.rotate(_arr(backend, np.zeros((3, 8), dtype=np.int64)))  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match=r"x.shape=\(8,\) has no sequence axis"):
        enc.rotate(_arr(backend, np.zeros(8), name))  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="seq_len must be None or a Python int"):
        enc.rotate(x, seq_len=3.5)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="seq_len must be >= 0, got -1"):
        enc.rotate(x, seq_len=-1)  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="rotary has no learned parameters"):
        enc.rotate(x, params={"table": x})  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="positions must have an integer or real floating dtype"):
        enc.cos_sin(np.array(["a", "b"]))  # type: ignore[attr-defined]


# -- the conformance suite ------------------------------------------------------------------------
CONFORMANCE = [
    ("rotary", {"dim": 64}),
    ("rotary", {"dim": 32, "rotary_dim": 8, "layout": "interleaved"}),
    ("rotary", {"dim": 32, "theta": 500000.0, "scaling": {
        "type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64}}),
    ("rotary", {"dim": 32, "scaling": {"type": "yarn", "factor": 16.0, "mscale": 1.0,
                                       "mscale_all_dim": 0.5,
                                       "original_max_position_embeddings": 128}}),
    ("rotary", {"dim": 16, "scaling": LONGROPE}),
    ("rotary", {"dim": 16, "scaling": {"type": "linear", "factor": 4.0}}),
]
DYNAMIC_CASE = ("rotary", {"dim": 16, "scaling": DYNAMIC})
_NEEDS_SEQ_LEN = ("dynamic NTK depends on the sequence length: under jit with traced positions "
                  "it needs seq_len= (checked in test_jax_jit_with_seq_len_dependent_scalings)")


def _compile_cheaply(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    # Inductor compiles C++ per graph: only the first configuration uses it, the others check
    # full-graph capture with aot_eager.
    if case.backend.name == "torch" and case.encoder != per.get_encoder("rotary", dim=64):
        monkeypatch.setenv(COMPILE_BACKEND_ENV, "aot_eager")


@parametrize_with_checks(CONFORMANCE)
def test_conformance(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    _compile_cheaply(case, monkeypatch)
    case.run()


@parametrize_with_checks([DYNAMIC_CASE], expected_failed_checks={
    "check_jit": _NEEDS_SEQ_LEN, "check_rotary_jit_traces_once": _NEEDS_SEQ_LEN})
def test_conformance_dynamic(case: Case, monkeypatch: pytest.MonkeyPatch) -> None:
    _compile_cheaply(case, monkeypatch)
    case.run()


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [None, 32])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16", "float64"])
@pytest.mark.parametrize(
    ("shape", "pos_shape"),
    [((2, 4, 1024, 64), (1024,)), ((1, 2, 4096, 64), (1,)), ((3, 700, 256), (700,))],
)
def test_torch_blocked_fast_path_is_bit_identical_to_generic(
    layout: str, rotary_dim: int | None, dtype: str, shape: tuple[int, ...],
    pos_shape: tuple[int, ...],
) -> None:
    """Inputs large enough for the cache-blocked eager path (>= 2 blocks) give exactly the
    generic Array API rotation, in every dtype and layout, partial rotary included."""
    if "torch" not in SELECTED:
        pytest.skip("torch is not among the selected backends")
    import torch

    from peregistry.rope._torch import BLOCK_ELEMENTS

    assert math.prod(shape) >= 2 * BLOCK_ELEMENTS
    enc = per.get_encoder("rotary", dim=shape[-1], rotary_dim=rotary_dim, layout=layout)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=gen).to(getattr(torch, dtype))
    pos = torch.randint(0, 5000, pos_shape, generator=gen)
    fast = enc.rotate(x, pos)
    generic = enc._rotate(x, pos, offset=0, params=None, seq_len=None, native=False)
    assert fast.dtype == x.dtype
    assert torch.equal(fast, generic)


def test_torch_compile_as_first_call_in_a_fresh_process_compiles_once() -> None:
    """The registry's type->backend cache is not filled while Dynamo traces, so a compiled rotate
    that is the very first call of a process compiles once for three calls (no recompile)."""
    if "torch" not in SELECTED:
        pytest.skip("torch is not among the selected backends")

    code = (
        "import torch, peregistry as per\n"
        "from torch._dynamo.utils import counters\n"
        "torch.manual_seed(0)\n"
        "enc = per.get_encoder('rotary', dim=16)\n"
        "f = torch.compile(lambda x, p: enc.rotate(x, p), fullgraph=True, backend='eager')\n"
        "for i in range(3):\n"
        "    f(torch.randn(2, 5, 16), torch.arange(i, i + 5))\n"
        "print(counters['stats']['unique_graphs'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "1"


_COLD = r"""
import torch, peregistry as per
enc = per.get_encoder("rotary", dim=16, layout="interleaved")
seen = []
def backend(gm, example_inputs):
    seen.extend(str(n.target) for n in gm.graph.nodes)
    return gm
f = torch.compile(lambda x, p: enc.rotate(x, p), fullgraph=True, backend=backend)
x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(0))
out = f(x, torch.arange(3, 8))
print(seen.count("peregistry.materialize.default"), torch.equal(out, enc.rotate(x, torch.arange(3, 8))))
"""


def test_torch_compile_cold_puts_the_fusion_boundary_in_the_graph() -> None:
    """A model compiled before any eager torch call (a fresh process, fullgraph) still gets the
    tables through ``peregistry::materialize`` (without it inductor recomputes the trigonometry
    for every element: 1.9x a copy for half, 4.3x for interleaved), and the eager result."""
    if "torch" not in SELECTED:
        pytest.skip("torch is not among the selected backends")
    r = subprocess.run([sys.executable, "-c", _COLD], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["2", "True"], r.stdout


def test_torch_export_leaves_the_boundary_out() -> None:
    """``torch.export`` gets no peregistry op: a saved program must load in a process that has
    not defined it."""
    if "torch" not in SELECTED:
        pytest.skip("torch is not among the selected backends")
    import torch

    enc = per.get_encoder("rotary", dim=16)

    class Rotate(torch.nn.Module):
        def forward(self, x: Any, p: Any) -> Any:
            return enc.rotate(x, p)

    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(3))
    ep = torch.export.export(Rotate(), (x, torch.arange(5)))
    assert not [n for n in ep.graph.nodes if "peregistry" in str(n.target)]
    assert torch.equal(ep.module()(x, torch.arange(5)), enc.rotate(x, torch.arange(5)))


def test_torch_compile_gradients_flow_through_the_materialized_table() -> None:
    """Under torch.compile the table passes a fusion boundary (for real-valued positions a
    stack, differentiable in every mode); gradients with respect to x and to real-valued
    positions are those of eager mode."""
    if "torch" not in SELECTED:
        pytest.skip("torch is not among the selected backends")
    import torch

    enc = per.get_encoder("rotary", dim=16)
    f = torch.compile(lambda x, p: (enc.rotate(x, p) ** 2 * torch.arange(16.0)).sum(),
                      fullgraph=True, backend="aot_eager")
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(2), requires_grad=True)
    p = (torch.arange(5) * 1.5).requires_grad_()
    f(x, p).backward()
    x2, p2 = x.detach().clone().requires_grad_(), p.detach().clone().requires_grad_()
    (enc.rotate(x2, p2) ** 2 * torch.arange(16.0)).sum().backward()
    assert x.grad is not None and p.grad is not None
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(p.grad, p2.grad)
