"""Llama 4's attention temperature (issue 33, item 1): ``enc.query_scale`` against the formula in
float64 on every selected backend (under jit too), against what transformers' Llama 4 attention
multiplies its NoPE layers' queries by (torch env), and ``from_hf_config``'s options."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import peregistry as per
from peregistry.hf_config import ConfigError, NoPositionalEncodingError, from_hf_config


def reference(p: np.ndarray[Any, Any], floor_scale: float, attn_scale: float) -> Any:
    """``log1p(floor((p + 1) / floor_scale)) * attn_scale + 1`` (transformers' expression) in
    float64; integer positions divided exactly (Python integers)."""
    if np.issubdtype(p.dtype, np.integer) and float(floor_scale).is_integer():
        count = np.array([(int(v) + 1) // int(floor_scale) for v in p.ravel()], dtype=np.float64)
        count = count.reshape(p.shape)
    else:
        count = np.floor((p.astype(np.float64) + 1.0) / floor_scale)
    return np.log1p(count) * attn_scale + 1.0


def _enc(**options: Any) -> Any:
    return per.get_encoder("rotary", dim=8, attn_temperature_tuning=True, **options)


@pytest.mark.parametrize(("floor_scale", "attn_scale"), [(8192, 0.1), (4, 0.25), (3.5, 1.0)])
def test_matches_the_formula(backend: Any, floor_scale: float, attn_scale: float) -> None:
    enc = _enc(floor_scale=floor_scale, attn_scale=attn_scale)
    ints = np.array([[0, 1, 2, 3, 6, 7, 8191, 8192], [16383, 16384, 10**6, 2**20 - 1, 2**24 + 1,
                                                      2**31 - 2, 2**31 - 1, 0]])
    for pos in (ints.astype(np.int32), ints[:, :6].astype(np.int64), ints[:, :6] + 0.5):
        if pos.dtype == np.int64 and backend.index_dtype() != backend.from_numpy(pos).dtype:
            continue  # JAX without x64 has no int64 (the int32 case covers it)
        want = reference(pos, floor_scale, attn_scale)
        for name, dtype in backend.float_dtypes().items():
            got = enc.query_scale(backend.from_numpy(pos), dtype=dtype)
            assert backend.dtype_name(got.dtype) == name and got.shape == pos.shape
            # computed in the backend's widest float, rounded once to `dtype`
            has64 = "float64" in backend.float_dtypes()
            wide = np.finfo(np.float64 if has64 else np.float32).eps
            eps = max(float(np.finfo(np.float32).eps) if name != "float64" else 0.0, wide)
            if name in ("bfloat16", "float16"):
                eps = 2.0 ** -7 if name == "bfloat16" else 2.0 ** -10
            got64 = backend.to_numpy(got).astype(np.float64)
            # real positions near 2**31 in float32 are rounded before the floor: compare there
            # only where the float32 position is exact
            exact = (pos == pos.astype(np.float32)) if pos.dtype.kind == "f" else True
            np.testing.assert_allclose(np.where(exact, got64, want), want, rtol=2 * eps, atol=0)


def test_default_and_untuned_are_ones(backend: Any) -> None:
    pos = backend.from_numpy(np.array([[0, 5, 10**6]], dtype=np.int32))
    for enc in (per.get_encoder("rotary", dim=8),
                per.get_encoder("mrope", dim=8, sections=(1, 1, 2))):
        pos_e = pos if enc.name == "rotary" else enc.text_positions(pos)
        got = backend.to_numpy(enc.query_scale(pos_e))
        assert got.shape == (1, 3) and np.all(got == 1.0)


def test_under_jit(backend: Any) -> None:
    enc = _enc(floor_scale=4)
    pos = np.arange(40, dtype=np.int32)
    fn = backend.jit(lambda p: enc.query_scale(p))
    if fn is None:
        pytest.skip(f"{backend.name} has no jit")
    got = backend.to_numpy(fn(backend.from_numpy(pos)))
    eager = backend.to_numpy(enc.query_scale(backend.from_numpy(pos)))
    np.testing.assert_array_equal(got, eager)


def test_options_are_checked() -> None:
    with pytest.raises(ValueError, match="option 'floor_scale' must be a finite number > 0, got 0"):
        _enc(floor_scale=0)
    with pytest.raises(ValueError, match="option 'attn_scale' must be a finite number"):
        _enc(attn_scale=float("nan"))
    # read only with attn_temperature_tuning=True: never silently dropped
    with pytest.raises(ValueError, match="'floor_scale' must be 8192.0 .* unless "
                                         "attn_temperature_tuning=True"):
        per.get_encoder("rotary", dim=8, floor_scale=4)
    with pytest.raises(ValueError, match="'attn_scale'"):
        per.get_encoder("rotary", dim=8, attn_scale=0.5)
    with pytest.raises(TypeError, match="attn_temperature_tuning"):
        per.get_encoder("rotary", dim=8, attn_temperature_tuning="yes")


def test_rotate_is_unchanged_by_the_temperature() -> None:
    x = np.random.default_rng(0).standard_normal((5, 8))
    np.testing.assert_array_equal(_enc(floor_scale=2).rotate(x, offset=100),
                                  per.get_encoder("rotary", dim=8).rotate(x, offset=100))


LLAMA4 = {"model_type": "llama4_text", "head_dim": 8, "rope_theta": 5e5, "num_hidden_layers": 8}


def test_from_hf_config_reads_the_options() -> None:
    enc = from_hf_config({**LLAMA4, "floor_scale": 16, "attn_scale": 0.5}, layer_type=0)
    assert enc.options["attn_temperature_tuning"] is True
    assert (enc.options["floor_scale"], enc.options["attn_scale"]) == (16.0, 0.5)
    bare = from_hf_config(LLAMA4, layer_type=0)  # Llama4TextConfig's defaults
    assert (bare.options["floor_scale"], bare.options["attn_scale"]) == (8192.0, 0.1)
    assert bare.options["attn_temperature_tuning"] is True
    off = from_hf_config({**LLAMA4, "attn_temperature_tuning": False, "floor_scale": 16},
                         layer_type=0)
    assert off == per.get_encoder("rotary", dim=8, theta=5e5, layout="interleaved")
    # Llama-4-Scout's released config.json: "attn_temperature_tuning": 4 (transformers 4.x's
    # default), read as Llama4TextAttention's `if self.attn_temperature_tuning` reads it
    scout = from_hf_config({**LLAMA4, "attn_temperature_tuning": 4}, layer_type=0)
    assert scout == bare
    assert from_hf_config({**LLAMA4, "attn_temperature_tuning": 0}, layer_type=0) == off
    # families that never read the keys ignore them, as their code does
    llama = from_hf_config({"model_type": "llama", "head_dim": 8, "attn_temperature_tuning": True})
    assert llama.options["attn_temperature_tuning"] is False


@pytest.mark.parametrize(("key", "value", "message"), [
    ("attn_temperature_tuning", "true", "attn_temperature_tuning='true' must be true, false or "
                                       "an integer"),
    ("attn_temperature_tuning", 1.0, "attn_temperature_tuning=1.0 must be true, false"),
    ("floor_scale", 0, "floor_scale=0 must be a number > 0"),
    ("floor_scale", "8192", "floor_scale='8192' must be a finite number > 0"),
    ("attn_scale", float("inf"), "attn_scale=inf must be a finite number"),
])
def test_from_hf_config_bad_values(key: str, value: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=f"model type 'llama4_text'.*{message}"):
        from_hf_config({**LLAMA4, key: value}, layer_type=0)


def test_nope_layers_point_to_query_scale() -> None:
    with pytest.raises(NoPositionalEncodingError, match=r"layer 3 .* scaled by Llama 4's "
                       r"attention temperature .* enc.query_scale"):
        from_hf_config(LLAMA4, layer_type=3)
    with pytest.raises(NoPositionalEncodingError, match="needs no encoder$"):
        from_hf_config({**LLAMA4, "attn_temperature_tuning": False}, layer_type=3)


def test_register_model_conventions_checks_attn_temperature() -> None:
    from peregistry.hf_config import register_model_conventions
    with pytest.raises(ValueError, match="attn_temperature="):
        register_model_conventions("my_llama", attn_temperature={"floor_scale": 1})


def test_transformers_llama4_queries(backend: Any) -> None:
    """The queries transformers' Llama 4 attention hands to its attention function on a NoPE
    layer, after a cache of earlier tokens, are ``q_proj(h) · query_scale(positions)``."""
    if backend.name != "torch":
        pytest.skip("transformers runs on torch (the torch env)")
    pytest.importorskip("transformers", reason="the reference implementation (torch env)")
    import torch
    from transformers import AttentionInterface, DynamicCache
    from transformers.models.llama4 import modeling_llama4 as m

    seen: list[torch.Tensor] = []

    def capture(module: Any, query: Any, key: Any, value: Any, mask: Any, **kw: Any) -> Any:
        seen.append(query.detach().clone())
        return m.eager_attention_forward(module, query, key, value, mask, **kw)

    AttentionInterface.register("peregistry_capture", capture)
    config = m.Llama4TextConfig(hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
                                head_dim=8, num_hidden_layers=4, intermediate_size=64,
                                intermediate_size_mlp=64, floor_scale=4, attn_scale=0.3,
                                use_qk_norm=False, vocab_size=64)
    config._attn_implementation = "peregistry_capture"
    layer = next(i for i in range(4) if not config.no_rope_layers[i])
    torch.manual_seed(0)
    attn = m.Llama4TextAttention(config, layer).eval()
    cache = DynamicCache(config=config)
    past, seq = 9, 7
    cache.update(torch.randn(2, 2, past, 8), torch.randn(2, 2, past, 8), layer)
    h = torch.randn(2, seq, 32)
    with torch.no_grad():
        attn(h, position_embeddings=None, attention_mask=None, past_key_values=cache)
    rope_layer = next(i for i in range(4) if config.no_rope_layers[i])
    enc = from_hf_config(config, layer_type=rope_layer)
    positions = torch.arange(past, past + seq)
    scale = enc.query_scale(positions, dtype=torch.float32)[:, None, None]
    with torch.no_grad():
        want = (attn.q_proj(h).view(2, seq, 4, 8) * scale).transpose(1, 2)
    # transformers computes the factor in float32 (log1p rounded there), ours in float64
    # rounded once: one rounding of the factor and one of the product apart at most
    eps = torch.finfo(torch.float32).eps
    torch.testing.assert_close(seen[-1], want, rtol=4 * eps, atol=0)
    assert not torch.all(scale == 1.0)  # the positions reach the steps of floor_scale=4


def test_negative_positions_are_refused(backend: Any) -> None:
    """Below -1 the formula is -inf or NaN: an error naming the minimum, never a silent NaN."""
    enc = _enc(floor_scale=4)
    with pytest.raises(ValueError, match="positions must be >= 0 .* minimum of -5"):
        enc.query_scale(backend.from_numpy(np.array([3, -5, 0], dtype=np.int32)))


@pytest.mark.parametrize("floor_scale", [2.0**31, 1e12, 1e20])
def test_floor_scale_past_the_integers(backend: Any, floor_scale: float) -> None:
    """A floor_scale the index dtype cannot hold counts in floats: 1 below it, exactly."""
    pos = np.array([0, 5, 2**31 - 1], dtype=np.int32)
    got = backend.to_numpy(_enc(floor_scale=floor_scale).query_scale(backend.from_numpy(pos)))
    # the default float32 output: one rounding of the float64 value (exact where it is 1)
    np.testing.assert_allclose(got, reference(pos, floor_scale, 0.1), rtol=2.0**-24, atol=0)


@pytest.mark.parametrize("floor_scale", [1, 2, 3])
def test_largest_index_is_finite(backend: Any, floor_scale: int) -> None:
    """Issue 42, item 9: at the index dtype's largest value (int32 2**31 - 1, as under JAX
    without x64, and int64 2**63 - 1) the count ``floor((p + 1)/floor_scale)`` does not wrap,
    also at ``floor_scale=1``, where it is ``p + 1``."""
    for dtype in (np.int32, np.int64):
        top = int(np.iinfo(dtype).max)
        pos = np.array([0, floor_scale - 1, top - 1, top], dtype=dtype)
        arr = backend.from_numpy(pos)
        if backend.to_numpy(arr).dtype != dtype:
            continue  # JAX without x64 has no int64 (the int32 case covers it)
        got = backend.to_numpy(_enc(floor_scale=floor_scale, attn_scale=0.1).query_scale(
            arr, dtype=backend.float_dtypes()["float32"])).astype(np.float64)
        want = reference(pos, floor_scale, 0.1)  # exact counts (Python integers)
        assert np.all(np.isfinite(got)) and got[-1] >= got[-2] >= 1.0
        # the wide float's count (float32 without float64: 2**31 - 1 rounds to 2**31) in float32
        np.testing.assert_allclose(got, want, rtol=2 * float(np.finfo(np.float32).eps), atol=0)
