"""vLLM's and SGLang's rotary branches beside M-RoPE that transformers lacks or reads otherwise
(issue 46), each against the engine's code re-derived in float64 NumPy, independently of
peregistry's: vLLM ``vllm/model_executor/layers/rotary_embedding/``

* ``deepseek_scaling_rope.py`` at 7bc8d408 (``DeepseekScalingRotaryEmbedding``: the
  ``deepseek_yarn`` and ``deepseek_llama_scaling`` branches of ``get_rope``) and, in the same
  file at 96e9b374 (Whamp/vllm, a fork carrying upstream's DeepSeek-V4 support),
  ``DeepseekV4ScalingRotaryEmbedding`` (``is_deepseek_v4``: the last ``rotary_dim`` features,
  a float32 cache, ``inverse`` negating ``sin``, ``key=None`` for queries only), with
  ``common.py``'s YaRN helpers (``tests/test_engine_scalings.py`` writes them out);
* ``llama4_vision_rope.py`` at 10760a01 (``Llama4VisionRotaryEmbedding``, ``mllama4``) with
  ``models/mllama4.py`` (``partial_rotary_factor=0.5``, ``is_neox_style=False``), and
  transformers 5.23's ``Llama4VisionRotaryEmbedding`` where transformers is installed;
* ``from_hf_config``'s reading of ``use_fope`` (vLLM ``get_rope`` at 119e08f0, Whamp/vllm;
  SGLang ``factory.py`` at 108c36c0), ``dual_chunk_attention_config`` (both factories) and
  Grok-1's top-level keys (vLLM ``models/grok1.py`` ``get_rope_scaling``); the rotations of
  FoPE, dual chunk and Grok-1 themselves are checked in test_engine_fope.py,
  test_dual_chunk.py and test_engine_scalings.py.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from test_engine_fope import engine as fope_engine
from test_engine_scalings import _bound, grok1_inv_freq, yarn_correction_range, yarn_ramp

import peregistry as per
from peregistry.hf_config import ConfigError
from peregistry.testing import Case, parametrize_with_checks

A = np.ndarray[Any, Any]


# -- vLLM, written out in float64 ----------------------------------------------------------------
def m_scale(scale: float, mscale: float) -> float:
    """``yarn_get_mscale``."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def deepseek_inv_freq(base: float, rotary_dim: int, scaling_factor: float, max_pos: int,
                      extrapolation_factor: float = 1.0) -> A:
    """``DeepseekScalingRotaryEmbedding._compute_inv_freq``, line by line."""
    pos_freqs = base ** (np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)
    inv_freq_extrapolation = 1.0 / pos_freqs
    inv_freq_interpolation = 1.0 / (scaling_factor * pos_freqs)
    low, high = yarn_correction_range(32, 1, rotary_dim, base, max_pos)
    inv_freq_mask = (1 - yarn_ramp(low, high, rotary_dim // 2)) * extrapolation_factor
    return inv_freq_interpolation * (1 - inv_freq_mask) + inv_freq_extrapolation * inv_freq_mask


def deepseek_mscale(scaling_factor: float, mscale: float = 1.0, mscale_all_dim: float = 0.0,
                    attn_factor: float = 1.0) -> float:
    """``DeepseekScalingRotaryEmbedding.__init__``'s ``self.mscale``."""
    return m_scale(scaling_factor, mscale) / m_scale(scaling_factor, mscale_all_dim) * attn_factor


def deepseek_forward(x: A, positions: A, inv_freq: A, mscale: float, rotary_dim: int, *,
                     neox: bool, last: bool = False, inverse: bool = False) -> A:
    """``forward_native``: the cache rows ``cat(cos·mscale, sin·mscale)`` of ``positions``,
    ``x_rot·cos + rotate(x_rot)·sin`` on the first (V3) or last (V4) ``rotary_dim`` features,
    ``sin`` negated with V4's ``inverse``."""
    freqs = np.einsum("i,j -> ij", positions.astype(np.float64), inv_freq)
    cos, sin = np.cos(freqs) * mscale, np.sin(freqs) * mscale
    if neox:
        cos, sin = np.concatenate((cos, cos), -1), np.concatenate((sin, sin), -1)
    else:
        cos, sin = np.repeat(cos, 2, -1), np.repeat(sin, 2, -1)
    if inverse:
        sin = -sin
    head = x.shape[-1]
    rot = x[..., head - rotary_dim:] if last else x[..., :rotary_dim]
    if neox:
        half = rotary_dim // 2
        rotated = np.concatenate((-rot[..., half:], rot[..., :half]), -1)
    else:
        rotated = np.stack((-rot[..., 1::2], rot[..., ::2]), -1).reshape(rot.shape)
    out = rot * cos + rotated * sin
    if last:
        return np.concatenate((x[..., : head - rotary_dim], out), -1)
    return np.concatenate((out, x[..., rotary_dim:]), -1)


def llama4_vision_cache(head_dim: int, theta: float, side: int) -> A:
    """``Llama4VisionRotaryEmbedding._compute_cos_sin_cache`` (``rotary_dim = head_dim/2``):
    complex ``(side² + 1, 1, head_dim/2)``, the class token last with angle 0."""
    rotary_dim = head_dim // 2
    inv_freq = (1.0 / theta ** (np.arange(0, rotary_dim, 2, dtype=np.float64)
                                / rotary_dim))[: rotary_dim // 2]
    num_patches = side * side
    img_idx = np.concatenate((np.arange(num_patches), [0])).reshape(-1, 1)
    img_idx[-1, -1] = -2  # ID_CLS_TOKEN
    fx, fy = img_idx % side, img_idx // side
    freqs_x = np.repeat((fx + 1)[..., None] * inv_freq[None, None, :], 2, -1)
    freqs_y = np.repeat((fy + 1)[..., None] * inv_freq[None, None, :], 2, -1)
    freqs = np.concatenate((freqs_x, freqs_y), -1)[..., ::2]
    freqs = np.where(img_idx.reshape(-1, 1, 1) < 0, 0.0, freqs)
    return np.cos(freqs) + 1j * np.sin(freqs)


def llama4_vision_forward(query: A, cache: A) -> A:
    """``forward_native`` on ``query`` ``(batch, tokens, heads, head_dim)``: pairs ``(2i,
    2i+1)`` as complex numbers times the cache's row of each token."""
    q = query[..., ::2] + 1j * query[..., 1::2]
    out = q * cache.reshape(1, cache.shape[0], 1, -1)
    return np.stack((out.real, out.imag), -1).reshape(query.shape)


def llama4_vision_positions(side: int) -> A:
    """The ``(x + 1, y + 1)`` of each patch, row-major, then ``(0, 0)`` for the class token."""
    idx = np.arange(side * side)
    return np.stack((np.append(idx % side + 1, 0), np.append(idx // side + 1, 0)))


def compare_rotation(backend: Any, enc: Any, x: A, pos: A, oracle: Any, scale: float) -> float:
    """Max error of ``enc.rotate`` against ``oracle(x in float64)`` on every dtype."""
    wide = "float64" if "float64" in backend.float_dtypes() else "float32"
    worst = 0.0
    for name, dt in backend.float_dtypes().items():
        xb = backend.from_numpy(x, dtype=dt)
        x_in = np.asarray(backend.to_numpy(xb), dtype=np.float64)
        want = oracle(x_in)
        got = np.asarray(backend.to_numpy(enc.rotate(xb, backend.from_numpy(pos))),
                         dtype=np.float64)
        err = np.abs(got - want)
        tol = _bound(name, wide, want, x_in, float(np.abs(pos).max()), scale)
        assert np.all(err <= tol), (f"{backend.name} {name}: error {float(err.max()):.3g}, "
                                    f"{int(np.sum(err > tol))} past the bound")
        worst = max(worst, float((err / np.maximum(tol, 1e-300)).max()))
    return worst


# -- DeepSeek: deepseek_yarn, deepseek_llama_scaling, DeepSeek-V4 ---------------------------------
DEEPSEEK = [  # (id, scaling, dim, rotary_dim, layout, last, inverse)
    pytest.param({"factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 0.707},
                 64, None, "interleaved", False, False, id="v3-mscale-only"),
    pytest.param({"factor": 4.0, "original_max_position_embeddings": 2048, "mscale": 1.0,
                  "mscale_all_dim": 1.0, "extrapolation_factor": 0.5,
                  "apply_yarn_scaling": False}, 48, 32, "half", False, False,
                 id="llama-scaling-neox-partial"),
    pytest.param({"factor": 16.0, "original_max_position_embeddings": 4096, "mscale": 0.0,
                  "mscale_all_dim": 0.0}, 96, 32, "interleaved", True, True, id="v4-inverse"),
]


@pytest.mark.parametrize(("scaling", "dim", "rotary_dim", "layout", "last", "inverse"), DEEPSEEK)
def test_deepseek_matches_vllm(backend: Any, scaling: dict[str, Any], dim: int,
                               rotary_dim: int | None, layout: str, last: bool,
                               inverse: bool) -> None:
    """Queries (and, but for V4's query-only call, keys) at positions past the original
    length; V4's ``inverse`` is ``direction="negative"``, its last features
    ``rotary_features="last"``."""
    theta = 10000.0
    rd = rotary_dim or dim
    enc = per.get_encoder("rotary", dim=dim, rotary_dim=rotary_dim, theta=theta, layout=layout,
                          rotary_features="last" if last else "first",
                          direction="negative" if inverse else "positive",
                          scaling={"type": "deepseek-yarn", **scaling})
    s, orig = scaling["factor"], scaling["original_max_position_embeddings"]
    inv = deepseek_inv_freq(theta, rd, s, orig, scaling.get("extrapolation_factor", 1.0))
    mscale = deepseek_mscale(s, scaling.get("mscale", 1.0), scaling.get("mscale_all_dim", 0.0))
    rng = np.random.default_rng(11)
    pos = np.concatenate((np.arange(3), rng.integers(orig, int(orig * s), size=5)))
    for _ in ("q",) if last else ("q", "k"):
        x = rng.standard_normal((2, len(pos), dim))
        compare_rotation(backend, enc, x, pos, lambda v: deepseek_forward(
            v, pos, inv, mscale, rd, neox=layout == "half", last=last, inverse=inverse), mscale)


@pytest.mark.backend_free  # NumPy arrays only: the same in every env
def test_deepseek_yarn_differs_from_transformers_yarn() -> None:
    """With only ``mscale`` set vLLM's factor is ``m(s, mscale)/m(s, 0)`` and transformers'
    ``m(s, 1)`` (both coefficients must be non-zero for its ratio): ``deepseek-yarn`` and
    ``yarn`` share the frequencies and differ by the ratio of the factors."""
    common = {"factor": 40.0, "original_max_position_embeddings": 4096, "mscale": 0.707}
    ours = per.get_encoder("rotary", dim=64, scaling={"type": "deepseek-yarn", **common})
    hf = per.get_encoder("rotary", dim=64, scaling={"type": "yarn", **common})
    x = np.random.default_rng(2).standard_normal((5, 64))
    np.testing.assert_allclose(ours.rotate(x) / hf.rotate(x),
                               m_scale(40.0, 0.707) / m_scale(40.0, 1.0), rtol=1e-12)


@pytest.mark.backend_free  # NumPy arrays only: the same in every env
def test_deepseek_llama_scaling_is_deepseek_yarn_without_softmax_factor() -> None:
    """vLLM builds both branches with one class, so the tables are equal; only the model's
    softmax scale differs (``m(s, mscale_all_dim)²`` on ``deepseek_yarn``)."""
    common = {"type": "deepseek-yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
              "mscale": 1.0, "mscale_all_dim": 0.707}
    yarn = per.get_encoder("rotary", dim=64, scaling=common)
    llama = per.get_encoder("rotary", dim=64, scaling={**common, "apply_yarn_scaling": False})
    pos = np.arange(0, 160000, 9999)
    np.testing.assert_array_equal(yarn.cos_sin(pos, dtype=np.float64),
                                  llama.cos_sin(pos, dtype=np.float64))
    assert yarn.softmax_scale_factor == pytest.approx(m_scale(40.0, 0.707) ** 2, rel=1e-15)
    assert llama.softmax_scale_factor == 1.0


@pytest.mark.backend_free  # NumPy arrays only: the same in every env
@pytest.mark.parametrize(("engine", "factor"), [
    ("vllm", m_scale(40.0, 0.707)), ("transformers", m_scale(40.0, 1.0))])
def test_from_hf_config_deepseek_yarn_by_engine(engine: str, factor: float) -> None:
    """A DeepSeek config with only ``mscale``: vLLM's ``deepseek_yarn`` (models/deepseek_v2.py
    renames the type) takes ``m(s, mscale)/m(s, 0)``, transformers ``m(s, 1)``."""
    cfg = {"model_type": "deepseek_v3", "qk_rope_head_dim": 64, "rope_theta": 10000.0,
           "max_position_embeddings": 163840, "rope_scaling": {
               "type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096,
               "mscale": 0.707}}
    enc = per.from_hf_config(cfg, engine=engine)
    cos, _ = enc.cos_sin(np.asarray([0]), dtype=np.float64)
    assert float(cos[0, 0]) == pytest.approx(factor, rel=1e-14)


V4 = {"model_type": "deepseek_v4", "head_dim": 96, "qk_rope_head_dim": 32,
      "num_attention_heads": 4, "hidden_size": 256, "rope_theta": 10000.0,
      "compress_rope_theta": 160000.0, "max_position_embeddings": 65536,
      "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 4096,
                       "beta_fast": 32, "beta_slow": 1}}


@pytest.mark.backend_free  # NumPy arrays only: the same in every env
@pytest.mark.parametrize(("layer", "theta"), [("main", 10000.0), ("compress", 160000.0)])
def test_from_hf_config_vllm_deepseek_v4(layer: str, theta: float) -> None:
    """``engine="vllm"``: every layer's rope is vLLM's V4 YaRN at its theta (models/deepseek_v4:
    ``compress_rope_theta`` where the compress ratio is > 1), factor 1 (``mscale=0``)."""
    enc = per.from_hf_config(V4, engine="vllm", layer_type=layer)
    x = np.random.default_rng(3).standard_normal((2, 7, 96))
    pos = np.arange(7) * 9000
    want = deepseek_forward(x, pos, deepseek_inv_freq(theta, 32, 16.0, 4096), 1.0, 32,
                            neox=False, last=True)
    np.testing.assert_allclose(enc.rotate(x, pos), want, rtol=0, atol=1e-10)
    with pytest.raises(ConfigError, match="layer_type='main' or 'compress'"):
        per.from_hf_config(V4, engine="vllm")


@pytest.mark.backend_free  # NumPy arrays only: the same in every env
def test_from_hf_config_splits_a_flat_deepseek_v4_config_as_transformers() -> None:
    """A ``config.json``'s flat ``rope_scaling`` read as ``DeepseekV4Config`` reads it
    (transformers 5.23 ``configuration_deepseek_v4.py``): the main layers plain RoPE at
    ``rope_theta``, the compressed ones YaRN at ``compress_rope_theta`` with attention factor 1
    (not YaRN's derived 1.277), ``partial_rotary_factor = qk_rope_head_dim / head_dim``: the
    options of the nested settings the config class writes."""
    nested = {**V4, "rope_scaling": None, "rope_parameters": {
        "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 1 / 3},
        "compress": {**V4["rope_scaling"], "type": None, "rope_type": "yarn",
                     "rope_theta": 160000.0, "partial_rotary_factor": 1 / 3,
                     "attention_factor": 1.0}}}
    for layer in ("main", "compress"):
        flat = per.from_hf_config(V4, layer_type=layer)
        assert flat.options == per.from_hf_config(nested, layer_type=layer).options
    assert per.from_hf_config(V4, layer_type="compress").options["rotary_dim"] == 32
    with pytest.raises(ConfigError, match="'main'.*'compress'"):
        per.from_hf_config(V4)


# -- Llama 4's vision rotary (mllama4) ------------------------------------------------------------
VISION = {"model_type": "llama4_vision_model", "hidden_size": 128, "num_attention_heads": 4,
          "rope_theta": 10000.0, "image_size": 48, "patch_size": 8}


def test_llama4_vision_matches_vllm(backend: Any) -> None:
    """``from_hf_config`` of Llama 4's vision config at the patch grid's positions (plus the
    class token) against vLLM's cache and complex rotation, queries and keys."""
    enc = per.from_hf_config(VISION)
    side, d = 6, 32
    pos = llama4_vision_positions(side)
    cache = llama4_vision_cache(d, 10000.0, side)
    rng = np.random.default_rng(5)
    for _ in ("q", "k"):
        x = rng.standard_normal((2, 4, side * side + 1, d))

        def oracle(v: A) -> A:
            return np.swapaxes(llama4_vision_forward(np.swapaxes(v, 1, 2), cache), 1, 2)

        compare_rotation(backend, enc, x, pos, oracle, 1.0)


def test_llama4_vision_matches_transformers() -> None:
    """transformers 5.23's own ``Llama4VisionRotaryEmbedding`` and ``vision_apply_rotary_emb``
    (float32) against peregistry's float32 rotation."""
    torch = pytest.importorskip("torch", reason="transformers' module runs on torch")
    m = pytest.importorskip("transformers.models.llama4.modeling_llama4",
                            reason="transformers is installed in the torch env only")
    from transformers import Llama4VisionConfig

    cfg = Llama4VisionConfig(hidden_size=128, num_attention_heads=4, image_size=48,
                             patch_size=8, rope_parameters={"rope_type": "default",
                                                            "rope_theta": 10000.0})
    freqs = m.Llama4VisionRotaryEmbedding(cfg)(torch.zeros(1))
    q = torch.randn(1, 37, 4, 32, generator=torch.Generator().manual_seed(0))
    want, _ = m.vision_apply_rotary_emb(q, q, freqs)
    enc = per.from_hf_config(VISION)
    got = enc.rotate(q.transpose(1, 2), torch.as_tensor(llama4_vision_positions(6)))
    torch.testing.assert_close(got.transpose(1, 2), want, rtol=0, atol=4e-6 * 37)


# -- the engines' other readings -----------------------------------------------------------------
BASE = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 4,
        "num_key_value_heads": 2, "max_position_embeddings": 4096, "rope_theta": 10000.0}


@pytest.mark.parametrize(("rope", "engine", "want"), [
    ({"rope_type": "default", "use_fope": True, "num_key_value_heads": 2, "num_inv_freq": 12,
      "fope_sep_head": True, "fope_init_factor": 0.5}, "vllm",
     {"num_kv_heads": 2, "num_inv_freq": 12, "sep_head": True, "init_factor": 0.5,
      "sin_padding": 0}),
    ({"type": "default", "use_fope": True, "num_kv_heads": 2}, "sglang",
     {"num_kv_heads": 2, "num_inv_freq": None, "sep_head": True, "init_factor": 0.1,
      "sin_padding": 1}),
    ({"rope_type": "default", "use_fope": True, "fope_sep_head": False}, "transformers",
     {"num_kv_heads": None, "sep_head": False, "sin_padding": 0}),
])
@pytest.mark.backend_free  # NumPy arrays only: the same in every env
def test_from_hf_config_maps_use_fope(rope: dict[str, Any], engine: str,
                                      want: dict[str, Any]) -> None:
    """Each engine's keys and defaults; the padding is the engine's (vLLM's 0 where the
    reading is transformers', which has no FoPE: the newest reference)."""
    enc = per.from_hf_config({**BASE, "rope_scaling": rope}, engine=engine)
    assert enc.name == "fope"
    got = {k: enc.options[k] for k in want}
    assert got == want
    o = enc.options
    assert (o["dim"], o["max_position_embeddings"]) == (64, 4096)
    # and the engine's forward, its own padding, on the mapped encoder (float64 NumPy; every
    # backend and dtype in test_engine_fope.py)
    rng = np.random.default_rng(6)
    params = {k: np.eye(v[-1]) + 0.3 * rng.standard_normal(v) for k, v in enc.param_shapes().items()}
    x, pos = rng.standard_normal((4, 7, 64)), rng.integers(0, 3 * 4096, size=7)
    oracle = fope_engine(x, pos, params, dim=64, theta=10000.0, max_pos=4096,
                         num_inv_freq=o["num_inv_freq"], sep_head=o["sep_head"],
                         sin_pad=float(o["sin_padding"]))
    np.testing.assert_allclose(enc.rotate(x, pos, params=params), oracle, rtol=0, atol=1e-9)


@pytest.mark.backend_free  # NumPy arrays only: the same in every env
def test_from_hf_config_maps_dual_chunk() -> None:
    """Both factories build ``DualChunkRotaryEmbedding`` from ``chunk_size``, ``local_size``
    before any rope type; peregistry refuses a scaling there rather than drop it. SGLang's
    class (``rope_variant.py`` at 0b1fd02d) builds vLLM's five caches and reads the same rows
    per role (read side by side), so test_dual_chunk.py's vLLM oracle stands for both."""
    dca = {"chunk_size": 8192, "local_size": 1024, "original_max_position_embeddings": 4096}
    enc = per.from_hf_config({**BASE, "dual_chunk_attention_config": dca})
    assert enc.name == "dual-chunk"
    assert enc.options == per.get_encoder("dual-chunk", dim=64, theta=10000.0, **dca).options
    with pytest.raises(ConfigError, match="rope type 'linear'.*refuses"):
        per.from_hf_config({**BASE, "dual_chunk_attention_config": dca,
                            "rope_scaling": {"type": "linear", "factor": 2.0}})


GROK = {"model_type": "grok-1", "architectures": ["Grok1ModelForCausalLM"], "hidden_size": 256,
        "num_attention_heads": 4, "max_position_embeddings": 32768, "rope_theta": 10000.0}


@pytest.mark.backend_free  # NumPy arrays only: the same in every env
@pytest.mark.parametrize("method", ["yarn_log", "theta_scale", "original"])
def test_from_hf_config_maps_grok1(method: str) -> None:
    """The top-level ``rope_type`` is Grok-1's method, ``scaling_factor`` its factor
    (``attn_factor`` is read by vLLM into a magnitude scale it never applies)."""
    cfg = {**GROK, "rope_type": method, "scaling_factor": 4.0,
           "original_max_position_embeddings": 8192, "attn_factor": 2.0}
    enc = per.from_hf_config(cfg)
    x = np.random.default_rng(4).standard_normal((2, 9, 64))
    pos = np.arange(9) * 4000
    t = np.einsum("i,j -> ij", pos.astype(np.float64),
                  grok1_inv_freq(10000.0, 64, 4.0, 8192, method))
    c, s = np.cos(t), np.sin(t)
    a, b = x[..., :32], x[..., 32:]
    want = np.concatenate((a * c - b * s, b * c + a * s), -1)
    np.testing.assert_allclose(enc.rotate(x, pos), want, rtol=0, atol=1e-10)
    with pytest.raises(ConfigError, match="scaling_factor"):
        per.from_hf_config({**GROK, "rope_type": method})


#: One case: a scaling only changes host-side frequencies, so deepseek-yarn's rotation is the
#: rotary machinery the suite checks elsewhere (its numbers are checked above on every backend);
#: axial is mrope's first scaling with bands, the case worth the suite's time.
CASES = [("mrope", {"dim": 16, "sections": (4, 4), "layout": "interleaved",
                    "scaling": {"type": "axial", "axes": 2}})]


@parametrize_with_checks(CASES)
def test_conformance(case: Case) -> None:
    case.run()


@pytest.mark.backend_free  # NumPy arrays only: the same in every env
def test_axial_refuses_unequal_bands() -> None:
    with pytest.raises(ValueError, match=r"'axes'=3 must divide rotary_dim/2 = 8"):
        per.get_encoder("mrope", dim=16, sections=(4, 4), scaling={"type": "axial", "axes": 3})
