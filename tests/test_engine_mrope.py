"""The serving engines' M-RoPE branches (issue 46), each re-derived in float64 NumPy from the
engine's own code, independently of peregistry's, and compared with what ``from_hf_config``
builds on NumPy, PyTorch and JAX within one rounding of the output dtype. Sources:

* vLLM ``vllm/model_executor/layers/rotary_embedding/``: ``__init__.py`` at 926c71f6
  (``get_rope``: ``yarn`` with ``mrope_section`` builds ``MRotaryEmbedding`` with
  ``original_max_position_embeddings`` as its ``max_position_embeddings``), ``mrope.py`` at
  dba39a55 (``MRotaryEmbedding``: ``cache_max_position_num = max_position_embeddings * 4``
  passed to the base class, whose ``max_position_embeddings`` YaRN's ``_compute_inv_freq``
  reads; ``forward_native``: bands by ``split``/``cat``, ``apply_interleaved_rope``),
  ``yarn_scaling_rope.py`` at ffdc9857 (frequencies and cache), ``mrope_interleaved.py`` at
  e7bcaef1 (``MRotaryEmbeddingInterleaved``, ``rope_type == "openpangu"``),
  ``bailing_mrope.py`` at 9c5b7163 (``BailingMRotaryEmbedding.select_cos_sin``);
* SGLang ``python/sglang/srt/layers/rotary_embedding/``: ``factory.py`` at 108c36c0
  (``get_rope``: ``video_rope``, ``mrope_interleaved_glm``, ``_bailing_yarn_kwargs``),
  ``mrope.py`` at 020d83a0 (``YaRNScalingMRotaryEmbedding``, the GLM ``axis_map``,
  ``forward_native``), ``yarn.py`` at 8448045c, ``bailing_mrope.py`` at 31767460 (cache from
  ``position_start = -max_position_embeddings``), ``base.py`` at 0099dee6 (the cache's rows
  ``t = arange(position_start, position_start + n)``), and the Triton kernels
  ``python/sglang/kernels/ops/attention/rotary_triton.py`` at 0d7ff714 (``is_interleaved_glm``
  read only under ``is_interleaved``; the Ernie-4.5 map Bailing uses).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from test_engine_branches import compare_rotation
from test_engine_scalings import apply_rotary, yarn_inv_freq

import peregistry as per

A = np.ndarray[Any, Any]


# -- the engines, written out in float64 -----------------------------------------------------------
def cache_rows(t: A, inv_freq: A, mscale: float = 1.0) -> tuple[A, A]:
    """The cos/sin cache's rows whose ``t`` (the row's position) is given: ``cos(t·ω)·mscale``,
    ``sin(t·ω)·mscale`` (``_compute_cos_sin_cache``)."""
    freqs = t.astype(np.float64)[..., None] * inv_freq
    return np.cos(freqs) * mscale, np.sin(freqs) * mscale


def vllm_rows(positions: A, rows: int) -> A:
    """``cos_sin_cache[positions]`` of a cache of ``rows`` rows ``t = 0 .. rows-1``: torch
    indexes a negative position from the end (row ``rows + p``, position ``rows + p``)."""
    assert np.all(positions >= -rows) and np.all(positions < rows), "outside vLLM's cache"
    return np.where(positions < 0, positions + rows, positions)


def bands(c: A, sections: list[int]) -> A:
    """``MRotaryEmbedding.forward_native``: ``cat([m[i] for i, m in enumerate(c.split(s))])``."""
    parts = np.split(c, np.cumsum(sections)[:-1], axis=-1)
    return np.concatenate([m[i] for i, m in enumerate(parts)], axis=-1)


def interleaved_rope(c: A, sections: list[int]) -> A:
    """``apply_interleaved_rope`` (vLLM and SGLang alike)."""
    out = c[0].copy()
    out[..., 1: sections[1] * 3: 3] = c[1][..., 1: sections[1] * 3: 3]
    out[..., 2: sections[2] * 3: 3] = c[2][..., 2: sections[2] * 3: 3]
    return out


def by_axis_map(c: A, axis_map: list[int]) -> A:
    """Column ``i`` from axis ``axis_map[i]`` (the Triton kernels' masked loads, summed)."""
    return np.stack([c[a][..., i] for i, a in enumerate(axis_map)], axis=-1)


def openpangu_id_list(a: int, b: int, c: int, force_last: bool = False) -> list[int]:
    """vLLM ``MRotaryEmbeddingInterleaved.get_mrope_interleaved_id_list``, line by line."""
    if force_last:
        a -= 1
    counts = {0: a, 1: b, 2: c}
    placed = dict.fromkeys(counts, 0)
    rem = counts.copy()
    seq: list[int] = []
    last = None
    for _ in range(a + b + c):
        cands = [k for k in rem if rem[k] > 0 and k != last]
        if not cands:
            cands = [k for k in rem if rem[k] > 0]
        best = min(cands, key=lambda k: (placed[k] / counts[k], k))
        seq.append(best)
        placed[best] += 1
        rem[best] -= 1
        last = best
    if force_last:
        seq.append(0)
    return seq


def sglang_glm_axis_map(sections: list[int]) -> list[int]:
    """SGLang ``MRotaryEmbedding.__init__``'s ``axis_map`` for ``mrope_interleaved_glm``."""
    counts, axis_map = [0, 0, 0], []
    for i in range(sum(sections)):
        current_ax = i % 3
        while counts[current_ax] >= sections[current_ax]:
            current_ax = (current_ax + 1) % 3
        axis_map.append(current_ax)
        counts[current_ax] += 1
    return axis_map


def triton_mrope_map(sections: list[int], interleaved: bool, glm: bool) -> list[int]:
    """``_triton_mrope_forward_fused``'s masks as an axis per pair (GLM's only under
    ``is_interleaved``)."""
    half = sum(sections)
    if interleaved and glm:
        return sglang_glm_axis_map(sections)
    if interleaved:
        return [1 if r % 3 == 1 and r <= 3 * sections[1] else
                2 if r % 3 == 2 and r <= 3 * sections[2] else 0 for r in range(half)]
    t_end, h_end = sections[0], sections[0] + sections[1]
    return [0 if r < t_end else 1 if r < h_end else 2 for r in range(half)]


def ernie_kernel_map(section_hwt: list[int]) -> list[int]:
    """``_triton_ernie45_rope_qk_fused``: ``where(r < h + w, where(r even, h, w), t)``."""
    h, w, t = section_hwt
    return [(1 if r % 2 == 0 else 2) if r < h + w else 0 for r in range(h + w + t)]


def vllm_bailing_select(c: A, spatial: int, half: int) -> A:
    """``BailingMRotaryEmbedding.select_cos_sin``: ``torch.where`` of the spatial mask, then
    the temporal slice."""
    mask = np.arange(spatial) % 2 == 0
    return np.concatenate((np.where(mask, c[1][..., :spatial], c[2][..., :spatial]),
                           c[0][..., spatial:half]), axis=-1)


def yarn_mscale(factor: float, attn_factor: float = 1.0) -> float:
    """``yarn_get_mscale(factor) * attn_factor`` (``yarn_get_mscale_simple`` in SGLang)."""
    return (1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0) * attn_factor


# -- helpers -----------------------------------------------------------------------------------
def _config(rope: dict[str, Any], *, head_dim: int = 64, max_pos: int = 16384,
            gptj: bool = False) -> dict[str, Any]:
    return {"model_type": "llama", "hidden_size": 4 * head_dim, "num_attention_heads": 4,
            "head_dim": head_dim, "max_position_embeddings": max_pos, "rope_theta": 10000.0,
            "rope_interleave": gptj, "rope_scaling": rope}


def _positions(rng: np.random.Generator, reach: int, *, centred: bool = False) -> A:
    """``(3, 12)`` T/H/W positions: text (all axes equal) and vision tokens up to ``reach``;
    ``centred``: Bailing's height/width, ``time + arange(n) - (n - 1)//2``, some negative."""
    t = np.concatenate((np.arange(4), rng.integers(0, reach, size=8)))
    h, w = t.copy(), t.copy()
    if centred:
        h[4:], w[4:] = t[4:] + np.arange(8) - 3, t[4:] + np.arange(8)[::-1] - 4
        t[4:8], h[4:8], w[4:8] = 0, np.arange(4) - 2, np.arange(4) - 1  # an image at the start
    else:
        h[4:], w[4:] = rng.integers(0, reach, size=8), rng.integers(0, reach, size=8)
    return np.stack((t, h, w))


def _compare(backend: Any, enc: Any, pos: A, oracle: Any, dim: int, mscale: float) -> None:
    """``enc.rotate`` of queries (4 heads) and keys (2 heads) on every dtype against
    ``oracle(x)`` (the engine's float64 result for the same input)."""
    rng = np.random.default_rng(3)
    for heads in (4, 2):
        compare_rotation(backend, enc, rng.standard_normal((heads, pos.shape[-1], dim)), pos,
                         oracle, mscale)


SHAPES = [pytest.param(64, 1.0, False, id="d64-neox"),
          pytest.param(64, 0.5, True, id="d64-rot32-gptj")]


# -- YaRN with mrope_section -------------------------------------------------------------------
@pytest.mark.parametrize("interleaved", [False, True], ids=["bands", "interleaved"])
@pytest.mark.parametrize(("dim", "partial", "gptj"), SHAPES)
@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_yarn_mrope_matches_engine(backend: Any, engine: str, dim: int, partial: float,
                                   gptj: bool, interleaved: bool) -> None:
    """``from_hf_config(config, engine=...)`` is vLLM's ``MRotaryEmbedding`` with YaRN (the
    correction range of ``4·L``) or SGLang's ``YaRNScalingMRotaryEmbedding`` (of ``L``):
    tables, rotation of queries and keys, positions past ``L``, partial rotary, both layouts."""
    rd = int(dim * partial)
    sections = [rd // 8, 3 * rd // 16, 3 * rd // 16] if not interleaved else [
        rd // 2 - 2 * (rd // 6), rd // 6, rd // 6]
    big, factor = 4096, 4.0
    rope = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": big,
            "mrope_section": sections, "mrope_interleaved": interleaved, "attn_factor": 0.9,
            "partial_rotary_factor": partial}
    enc = per.from_hf_config(_config(rope, head_dim=dim, gptj=gptj), engine=engine)
    context = 4 * big if engine == "vllm" else big  # what _compute_inv_freq reads
    inv = yarn_inv_freq(10000.0, rd, factor, context)
    mscale = yarn_mscale(factor, 0.9)
    pos = _positions(np.random.default_rng(1), 3 * big)

    def oracle(x: A) -> A:
        cos, sin = cache_rows(pos, inv, mscale)
        pick = interleaved_rope if interleaved else bands
        return apply_rotary(x, pick(cos, sections), pick(sin, sections), rd, not gptj)

    _compare(backend, enc, pos, oracle, dim, mscale)


def test_vllm_quadruples_the_yarn_context() -> None:
    """The engines differ: vLLM's correction range is that of ``4·L``, SGLang's (and
    transformers') that of ``L``; ``engine="transformers"`` builds SGLang's tables, bit for bit,
    and ``engine="vllm"`` is ``yarn`` with ``original_max_position_embeddings = 4·L``."""
    rope = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 8192,
            "mrope_section": [8, 12, 12]}
    config = _config(rope, max_pos=65536)
    built = {e: per.from_hf_config(config, engine=e) for e in ("transformers", "vllm", "sglang")}
    pos = np.stack([np.arange(0, 60000, 999)] * 3)
    cos = {e: enc.cos_sin(pos, dtype=np.float64)[0] for e, enc in built.items()}
    np.testing.assert_array_equal(cos["transformers"], cos["sglang"])
    assert float(np.abs(cos["vllm"] - cos["sglang"]).max()) > 0.5  # different pairs stretched
    lo = {c: yarn_correction(c) for c in (8192, 4 * 8192)}
    assert lo[8192] != lo[4 * 8192], lo
    by_hand = per.get_encoder("mrope", dim=64, sections=(8, 12, 12), scaling={
        "type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4 * 8192})
    np.testing.assert_allclose(built["vllm"].cos_sin(pos, dtype=np.float64)[0],
                               by_hand.cos_sin(pos, dtype=np.float64)[0], rtol=0, atol=1e-15)


def yarn_correction(context: int, d: int = 64, theta: float = 10000.0) -> tuple[int, int]:
    """``yarn_find_correction_range(32, 1, d, θ, context)`` (truncated)."""
    def dim_of(n: float) -> float:
        return d * math.log(context / (n * 2 * math.pi)) / (2 * math.log(theta))
    return max(math.floor(dim_of(32)), 0), min(math.ceil(dim_of(1)), d - 1)


# -- openpangu -----------------------------------------------------------------------------------
def test_openpangu_map_by_hand() -> None:
    """``get_mrope_interleaved_id_list(1, 2, 2)`` then the held-back temporal pair, worked out
    by hand from vLLM's loop: ``[0, 1, 2, 1, 2, 0]``; the two-axis form alternates."""
    assert openpangu_id_list(2, 2, 2, force_last=True) == [0, 1, 2, 1, 2, 0]
    assert openpangu_id_list(3, 3, 0) == [0, 1, 0, 1, 0, 1]
    enc = per.from_hf_config(_config({"rope_type": "openpangu", "mrope_section": [2, 2, 2],
                                      "mrope_interleaved": True}, head_dim=12))
    assert enc.options["pair_axes"] == (0, 1, 2, 1, 2, 0)


@pytest.mark.parametrize("sections", [[8, 12, 12], [16, 16]], ids=["thw", "hw"])
@pytest.mark.parametrize(("dim", "partial", "gptj"), SHAPES)
def test_openpangu_matches_vllm(backend: Any, sections: list[int], dim: int, partial: float,
                                gptj: bool) -> None:
    """``rope_type="openpangu"`` is vLLM's ``MRotaryEmbeddingInterleaved``: the cache's
    ``[cos | sin]`` columns gathered from axis ``mrope_dim[i]`` (``mrope_dim = id_list * 2``)."""
    rd = int(dim * partial)
    sections = [s * rd // 64 for s in sections]
    enc = per.from_hf_config(_config({"rope_type": "openpangu", "mrope_section": sections,
                                      "mrope_interleaved": True, "partial_rotary_factor": partial},
                                     head_dim=dim, gptj=gptj))
    ids = (openpangu_id_list(*sections, force_last=True) if len(sections) == 3
           else openpangu_id_list(*sections, 0))
    mrope_dim = ids * 2
    pos = _positions(np.random.default_rng(2), 20000)[: len(sections)]
    inv = 1.0 / 10000.0 ** (np.arange(0, rd, 2, dtype=np.float64) / rd)

    def oracle(x: A) -> A:
        cos, sin = cache_rows(pos, inv)
        cos_sin = np.concatenate((cos, sin), axis=-1)  # the cache's rows, (axes, tokens, rd)
        picked = by_axis_map(cos_sin, mrope_dim)
        return apply_rotary(x, picked[..., : rd // 2], picked[..., rd // 2:], rd, not gptj)

    _compare(backend, enc, pos, oracle, dim, 1.0)


# -- SGLang's mrope_interleaved_glm --------------------------------------------------------------
def test_glm_map_is_sglangs_comment() -> None:
    """SGLang's source draws the GLM-V map for ``[8, 12, 12]``: ``t h w`` eight times, then
    ``h h w`` twice, then ``w w``."""
    assert sglang_glm_axis_map([8, 12, 12]) == [0, 1, 2] * 8 + [1, 1, 2] * 2 + [2, 2]
    enc = per.from_hf_config(_config({"type": "default", "mrope_section": [8, 12, 12],
                                      "mrope_interleaved": True, "mrope_interleaved_glm": True}))
    assert list(enc.options["pair_axes"]) == sglang_glm_axis_map([8, 12, 12])


@pytest.mark.parametrize(("interleaved", "glm"), [(True, True), (False, True)],
                         ids=["interleaved-glm", "glm-alone"])
def test_glm_matches_sglang_triton(backend: Any, interleaved: bool, glm: bool) -> None:
    """``mrope_interleaved_glm`` is the Triton path's (CUDA) map when ``mrope_interleaved`` is
    set too; alone it changes nothing (contiguous bands)."""
    sections = [8, 12, 12]
    enc = per.from_hf_config(_config({"type": "default", "mrope_section": sections,
                                      "mrope_interleaved": interleaved,
                                      "mrope_interleaved_glm": glm}))
    axis_map = triton_mrope_map(sections, interleaved, glm)
    pos = _positions(np.random.default_rng(4), 30000)
    inv = 1.0 / 10000.0 ** (np.arange(0, 64, 2, dtype=np.float64) / 64)

    def oracle(x: A) -> A:
        cos, sin = cache_rows(pos, inv)
        return apply_rotary(x, by_axis_map(cos, axis_map), by_axis_map(sin, axis_map), 64, True)

    _compare(backend, enc, pos, oracle, 64, 1.0)


def test_glm_triton_and_forward_native_differ() -> None:
    """SGLang's ``forward_native`` (CPU, the RL on-policy path) ignores the flag and applies
    Qwen3-VL's map: for GLM-V's ``[8, 12, 12]`` the two paths rotate different pairs by
    different axes; for Qwen3-VL's ``[24, 20, 20]`` they agree. ``pair_axes`` from the Qwen3-VL
    map reproduces ``forward_native``."""
    triton = triton_mrope_map([8, 12, 12], True, True)
    native = list(interleaved_rope(np.arange(3)[:, None] * np.ones((3, 32)), [8, 12, 12])
                  .astype(int))
    assert native != triton
    assert [sum(a == k for a in native) for k in range(3)] == [11, 11, 10]
    qwen3 = list(interleaved_rope(np.arange(3)[:, None] * np.ones((3, 64)), [24, 20, 20])
                 .astype(int))
    assert qwen3 == triton_mrope_map([24, 20, 20], True, True)
    glm = per.from_hf_config(_config({"type": "default", "mrope_section": [8, 12, 12],
                                      "mrope_interleaved": True, "mrope_interleaved_glm": True}))
    as_native = per.get_encoder("mrope", dim=64, sections=(11, 11, 10), pair_axes=tuple(native))
    pos = np.stack((np.arange(6), np.arange(6) + 100, np.arange(6) + 300))
    x = np.random.default_rng(5).standard_normal((6, 64))
    inv = 1.0 / 10000.0 ** (np.arange(0, 64, 2, dtype=np.float64) / 64)
    cos, sin = cache_rows(pos, inv)
    want = apply_rotary(x, interleaved_rope(cos, [8, 12, 12]), interleaved_rope(sin, [8, 12, 12]),
                        64, True)
    np.testing.assert_allclose(as_native.rotate(x, pos), want, rtol=0, atol=1e-12)
    assert float(np.abs(glm.rotate(x, pos) - want).max()) > 0.1


# -- Bailing's M-RoPE (SGLang video_rope) ------------------------------------------------------
@pytest.mark.parametrize(("rope_type", "factor"), [("default", 1.0), ("yarn", 4.0),
                                                   ("default", 2.0)],
                         ids=["default", "yarn", "default-with-factor"])
@pytest.mark.parametrize(("dim", "partial", "gptj"), SHAPES)
def test_bailing_matches_sglang(backend: Any, rope_type: str, factor: float, dim: int,
                                partial: float, gptj: bool) -> None:
    """``video_rope`` is SGLang's ``BailingMRotaryEmbedding``: rows from
    ``position_start = -max_position_embeddings`` (a centred, negative height or width turns by
    ``p·ω``), the Ernie-4.5 kernel's map over ``(h, w, t)`` sections, and YaRN whenever
    ``factor > 1``, ``rope_type`` ``"default"`` included (``_bailing_yarn_kwargs``)."""
    rd = int(dim * partial)
    sections = [rd // 2 - 2 * (3 * rd // 16), 3 * rd // 16, 3 * rd // 16]
    big, max_pos = 2048, 8192
    rope = {"rope_type": rope_type, "mrope_section": sections, "video_rope": True,
            "partial_rotary_factor": partial, "attn_factor": 1.1,
            **({"factor": factor} if factor != 1.0 else {}),
            **({"original_max_position_embeddings": big} if rope_type == "yarn" else {})}
    enc = per.from_hf_config(_config(rope, head_dim=dim, max_pos=max_pos, gptj=gptj))
    context = big if rope_type == "yarn" else max_pos
    inv = (yarn_inv_freq(10000.0, rd, factor, context) if factor > 1
           else 1.0 / 10000.0 ** (np.arange(0, rd, 2, dtype=np.float64) / rd))
    mscale = yarn_mscale(factor, 1.1) if factor > 1 else 1.0
    start = -max_pos
    pos = _positions(np.random.default_rng(6), 3 * big, centred=True)
    axis_map = ernie_kernel_map([sections[1], sections[2], sections[0]])

    def oracle(x: A) -> A:
        rows = pos - start  # forward(): positions - self.position_start
        cos, sin = cache_rows(rows + start, inv, mscale)  # row r holds t = start + r
        return apply_rotary(x, by_axis_map(cos, axis_map), by_axis_map(sin, axis_map), rd,
                            not gptj)

    assert pos.min() < 0
    _compare(backend, enc, pos, oracle, dim, mscale)


def test_vllm_bailing_wraps_negative_positions() -> None:
    """vLLM's ``BailingMRotaryEmbedding`` shares the map (``select_cos_sin``) but its cache
    starts at row 0 (``4·max_position_embeddings`` rows): a negative height or width reads row
    ``rows + p`` and turns by ``(rows + p)·ω``, not ``p·ω``. peregistry (and SGLang) give
    ``p·ω``: equal to vLLM on non-negative positions, different where one is negative."""
    sections, max_pos = [8, 12, 12], 8192
    enc = per.from_hf_config(_config({"rope_type": "default", "mrope_section": sections,
                                      "video_rope": True}, max_pos=max_pos))
    inv = 1.0 / 10000.0 ** (np.arange(0, 64, 2, dtype=np.float64) / 64)
    x = np.random.default_rng(7).standard_normal((2, 4, 64))

    def vllm(pos: A) -> A:
        t = vllm_rows(pos, 4 * max_pos)  # the row read, which is its t
        cos, sin = cache_rows(t, inv)
        return apply_rotary(x, vllm_bailing_select(cos, 24, 32),
                            vllm_bailing_select(sin, 24, 32), 64, True)

    ahead = np.array([[5, 5, 6, 6], [5, 6, 7, 8], [4, 5, 6, 9]])
    np.testing.assert_allclose(enc.rotate(x, ahead), vllm(ahead), rtol=0, atol=1e-12)
    centred = np.array([[0, 0, 2, 2], [-1, 0, 1, 3], [-2, -1, 2, 3]])
    assert float(np.abs(enc.rotate(x, centred) - vllm(centred)).max()) > 0.1
    np.testing.assert_allclose(enc.rotate(x, np.where(centred < 0, centred + 4 * max_pos,
                                                          centred)), vllm(centred),
                               rtol=0, atol=1e-9)


# -- from_hf_config's keys and refusals ------------------------------------------------------------
@pytest.mark.parametrize("key", ["rope_type", "type"])
def test_both_key_spellings(key: str) -> None:
    """``rope_type`` and the older ``type`` reach the same branches."""
    for rope in ({key: "openpangu", "mrope_section": [8, 12, 12], "mrope_interleaved": True},
                 {key: "yarn", "mrope_section": [8, 12, 12], "video_rope": True, "factor": 2.0,
                  "original_max_position_embeddings": 4096}):
        enc = per.from_hf_config(_config(rope))
        assert enc.name == "mrope" and enc.options["pair_axes"] is not None, rope
    enc = per.from_hf_config(_config({key: "yarn", "mrope_section": [8, 12, 12], "factor": 2.0,
                                      "original_max_position_embeddings": 4096}), engine="vllm")
    assert enc.options["scaling"]["original_max_position_embeddings"] == 4 * 4096


@pytest.mark.parametrize(("rope", "engine", "message"), [
    ({"rope_type": "openpangu", "mrope_section": [8, 12, 12]}, "vllm", "mrope_interleaved=true"),
    ({"rope_type": "openpangu", "mrope_section": [32], "mrope_interleaved": True}, "vllm",
     "2 or 3 entries"),
    ({"rope_type": "default", "mrope_section": [8, 10, 14], "video_rope": True}, "sglang",
     "h == w"),
    ({"rope_type": "yarn", "mrope_section": [8, 12, 12], "factor": 2.0,
      "extrapolation_factor": 0.5}, "sglang", "extrapolation_factor=0.5"),
    ({"rope_type": "yarn", "mrope_section": [8, 12, 12], "factor": 2.0}, "vllm",
     "original_max_position_embeddings"),
    ({"rope_type": "default"}, "tgi", "engine='tgi' is not one of"),
])
def test_refused(rope: dict[str, Any], engine: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        per.from_hf_config(_config(rope), engine=engine)
