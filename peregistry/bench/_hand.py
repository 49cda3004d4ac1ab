"""The plain, obvious code a user would write for each encoder, calling the framework directly.

``xp`` is the framework's own module (:meth:`Backend.native`: numpy, torch, jax.numpy or
array_api_strict). Only calls these spell alike are used (the standard's spellings: ``concat``,
``reshape(x, shape)``), so one text is the hand-written code of each. One exception:
``table[idx]`` (an integer array indexing the first axis of a 2-D table) is what everyone
writes, but the standard allows integer-array indices only when every axis is indexed, so the
lookup encoders are not timed where the framework refuses it (array_api_strict).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["hand_alibi", "hand_fope", "hand_learned", "hand_learned_2d", "hand_mrope",
           "hand_rotary", "hand_rotary_decode", "hand_shaw", "hand_sinusoidal", "hand_t5",
           "hand_transformer_xl", "hand_xpos", "hf_apply_rotary"]


def hand_sinusoidal(xp: Any, pos: Any, dim: int, base: float = 10000.0) -> Any:
    """Vaswani et al. 2017, interleaved: ``[sin(p ω_0), cos(p ω_0), sin(p ω_1), ...]``."""
    inv_freq = base ** (-xp.arange(0, dim, 2, dtype=xp.float32) / dim)
    angle = pos[:, None] * inv_freq[None, :]
    return xp.reshape(xp.stack((xp.sin(angle), xp.cos(angle)), axis=-1), (pos.shape[0], dim))


def hand_rotary(xp: Any, x: Any, theta: float = 10000.0) -> Any:
    """GPT-NeoX/Llama RoPE (``rotate_half``) of ``x: (..., seq, dim)`` at positions ``0..seq-1``."""
    seq, dim = x.shape[-2], x.shape[-1]
    inv_freq = theta ** (-xp.arange(0, dim, 2, dtype=xp.float32) / dim)
    freqs = xp.arange(seq, dtype=xp.float32)[:, None] * inv_freq[None, :]
    emb = xp.concat((freqs, freqs), axis=-1)
    cos, sin = xp.cos(emb), xp.sin(emb)
    half = dim // 2
    rotated = xp.concat((-x[..., half:], x[..., :half]), axis=-1)
    return x * cos + rotated * sin


def hf_apply_rotary(xp: Any, x: Any, cos: Any, sin: Any) -> Any:
    """Hugging Face's own rotation (``modeling_llama.apply_rotary_pos_emb`` for one tensor):
    ``x·cos + rotate_half(x)·sin`` with full-width tables ``(seq, dim)`` made beforehand, as a
    model makes them once per forward (``position_embeddings``) and reuses in every layer."""
    half = x.shape[-1] // 2
    rotated = xp.concat((-x[..., half:], x[..., :half]), axis=-1)  # rotate_half
    return x * cos + rotated * sin


def hand_rotary_interleaved(xp: Any, x: Any, theta: float = 10000.0) -> Any:
    """GPT-J/RoFormer RoPE (``rotate_every_two``) of ``x: (..., seq, dim)`` at ``0..seq-1``."""
    seq, dim = x.shape[-2], x.shape[-1]
    inv_freq = theta ** (-xp.arange(0, dim, 2, dtype=xp.float32) / dim)
    freqs = xp.arange(seq, dtype=xp.float32)[:, None] * inv_freq[None, :]
    # [f0 f1] -> [f0 f0 f1 f1]
    emb = xp.reshape(xp.stack((freqs, freqs), axis=-1), (seq, dim))
    cos, sin = xp.cos(emb), xp.sin(emb)
    # [x0 x1 x2 x3] -> [-x1 x0 -x3 x2]
    rotated = xp.reshape(xp.stack((-x[..., 1::2], x[..., 0::2]), axis=-1), x.shape)
    return x * cos + rotated * sin


def hand_rotary_decode(xp: Any, qs: Sequence[Any], ks: Sequence[Any], pos: Any,
                       theta: float = 10000.0) -> list[tuple[Any, Any]]:
    """One decoding step of a Llama-style model's RoPE as Hugging Face writes it: ``(cos, sin)``
    of the step's position ids made once (``position_embeddings``), then the ``q`` and ``k`` of
    every layer rotated with them (``apply_rotary_pos_emb``)."""
    dim = qs[0].shape[-1]
    inv_freq = theta ** (-xp.arange(0, dim, 2, dtype=xp.float32) / dim)
    freqs = pos[:, None] * inv_freq[None, :]  # pos: float32 position ids
    emb = xp.concat((freqs, freqs), axis=-1)
    cos, sin = xp.cos(emb), xp.sin(emb)
    half = dim // 2

    def rotate(x: Any) -> Any:
        return x * cos + xp.concat((-x[..., half:], x[..., :half]), axis=-1) * sin

    return [(rotate(q), rotate(k)) for q, k in zip(qs, ks, strict=True)]


def hand_xpos(xp: Any, x: Any, scale_base: float = 512.0, theta: float = 10000.0) -> Any:
    """xPos queries (rotary-embedding-torch ``use_xpos``, interleaved pairs) of ``x: (..., seq,
    dim)`` at positions ``0..seq-1``: RoPE times ``ζ_i^(p/B)``, ``ζ_i = (2i + 0.4·dim)/(1.4·dim)``."""
    seq, dim = x.shape[-2], x.shape[-1]
    i2 = xp.arange(0, dim, 2, dtype=xp.float32)
    inv_freq = theta ** (-i2 / dim)
    pos = xp.arange(seq, dtype=xp.float32)[:, None]
    freqs = pos * inv_freq[None, :]
    scale = ((i2 + 0.4 * dim) / (1.4 * dim))[None, :] ** (pos / scale_base)
    cos = xp.reshape(xp.stack((xp.cos(freqs), xp.cos(freqs)), axis=-1), (seq, dim))
    sin = xp.reshape(xp.stack((xp.sin(freqs), xp.sin(freqs)), axis=-1), (seq, dim))
    scale = xp.reshape(xp.stack((scale, scale), axis=-1), (seq, dim))
    # x: [x0 x1 x2 x3] -> [-x1 x0 -x3 x2]
    rotated = xp.reshape(xp.stack((-x[..., 1::2], x[..., 0::2]), axis=-1), x.shape)
    return (x * cos + rotated * sin) * scale


def hand_fope(xp: Any, x: Any, cos_coef: Any, sin_coef: Any, theta: float = 10000.0) -> Any:
    """FoPE as vLLM's ``FourierRotaryEmbedding`` computes it, of ``x: (1, heads, seq, dim)`` at
    positions ``0..seq-1``: per KV head, ``cos``/``sin`` of the ``D`` retained frequencies mixed
    by the ``(kv, D, D)`` coefficients, the other pairs at cos 1 and sin 0, the query heads
    grouped over the KV heads (``query.view(seq·kv, -1, dim)``), then ``rotate_half``."""
    b, heads, seq, dim = x.shape
    kv, d = cos_coef.shape[0], cos_coef.shape[-1]
    inv_freq = theta ** (-xp.arange(0, 2 * d, 2, dtype=xp.float32) / dim)
    freqs = xp.arange(seq, dtype=xp.float32)[:, None] * inv_freq[None, :]   # (seq, D)
    cos = xp.matmul(xp.cos(freqs), cos_coef)                                # (kv, seq, D)
    sin = xp.matmul(xp.sin(freqs), sin_coef)
    pad = (kv, seq, dim // 2 - d)
    cos = xp.concat((cos, xp.ones(pad, dtype=xp.float32)), axis=-1)
    sin = xp.concat((sin, xp.zeros(pad, dtype=xp.float32)), axis=-1)
    cos = xp.concat((cos, cos), axis=-1)[:, None, ...]                      # (kv, 1, seq, dim)
    sin = xp.concat((sin, sin), axis=-1)[:, None, ...]
    xg = xp.reshape(x, (b, kv, heads // kv, seq, dim))
    half = dim // 2
    rotated = xp.concat((-xg[..., half:], xg[..., :half]), axis=-1)
    return xp.reshape(xg * cos + rotated * sin, x.shape)


def hand_mrope(xp: Any, x: Any, pos: Any, sections: Sequence[int], theta: float = 10000.0) -> Any:
    """Qwen2-VL M-RoPE (``apply_multimodal_rotary_pos_emb``) of ``x: (..., seq, dim)`` at float
    ``pos: (len(sections), seq)``: frequency pair ``i`` of band ``a`` turns with ``pos[a]``."""
    dim = x.shape[-1]
    inv_freq = theta ** (-xp.arange(0, dim, 2, dtype=xp.float32) / dim)
    freqs = pos[:, :, None] * inv_freq[None, None, :]          # (axes, seq, dim/2)
    bands, start = [], 0
    for axis, n in enumerate(sections):
        bands.append(freqs[axis, :, start:start + n])
        start += n
    freqs = xp.concat(tuple(bands), axis=-1)                    # (seq, dim/2)
    emb = xp.concat((freqs, freqs), axis=-1)
    cos, sin = xp.cos(emb), xp.sin(emb)
    half = dim // 2
    rotated = xp.concat((-x[..., half:], x[..., :half]), axis=-1)
    return x * cos + rotated * sin


def hand_learned(xp: Any, pos: Any, table: Any) -> Any:
    """Learned absolute positions (BERT, GPT-2): ``table[pos]``."""
    return table[pos]


def hand_learned_2d(xp: Any, pos: Any, row: Any, col: Any) -> Any:
    """DETR-style learned 2-D positions ``pos: (n, 2)`` as (row, col): ``concat(col[c], row[r])``."""
    return xp.concat((col[pos[:, 1]], row[pos[:, 0]]), axis=-1)


def hand_t5(xp: Any, q: Any, k: Any, table: Any, index_dtype: Any, num_buckets: int = 32,
            max_distance: int = 128) -> Any:
    """T5 bidirectional relative bias (Hugging Face ``T5Attention._relative_position_bucket``, then
    ``compute_bias``) at float positions: ``(heads, Q, K)``."""
    rel = k[None, :] - q[:, None]                               # memory - query
    nb = num_buckets // 2
    n = xp.abs(rel)
    max_exact = nb // 2
    is_small = n < max_exact
    large = max_exact + xp.floor(xp.log(xp.clip(n, max_exact, None) / max_exact)
                                 / math.log(max_distance / max_exact) * (nb - max_exact))
    large = xp.clip(large, None, nb - 1)
    bucket = xp.where(is_small, n, large)
    bucket = xp.where(rel > 0, bucket + nb, bucket)
    values = table[xp.asarray(bucket, dtype=index_dtype)]      # (Q, K, heads)
    return xp.moveaxis(values, -1, 0)


def hand_shaw(xp: Any, q: Any, k: Any, table: Any, max_distance: int) -> Any:
    """Shaw et al. 2018: ``table[clip(k - q, -m, m) + m]`` → ``(Q, K, dim)``."""
    rel = k[None, :] - q[:, None]
    return table[xp.clip(rel, -max_distance, max_distance) + max_distance]


def hand_transformer_xl(xp: Any, q: Any, k: Any, dim: int, base: float = 10000.0) -> Any:
    """Transformer-XL relative sinusoid of ``q - k``, sines then cosines → ``(Q, K, dim)``."""
    inv_freq = base ** (-xp.arange(0, dim, 2, dtype=xp.float32) / dim)
    angle = (q[:, None] - k[None, :])[:, :, None] * inv_freq[None, None, :]
    return xp.concat((xp.sin(angle), xp.cos(angle)), axis=-1)


def hand_alibi(xp: Any, q: Any, k: Any, num_heads: int) -> Any:
    """ALiBi (Press et al. 2022) for a power-of-two head count: ``-slope_h · |q - k|``."""
    slopes = 2.0 ** (-8.0 * xp.arange(1, num_heads + 1, dtype=xp.float32) / num_heads)
    dist = xp.abs(k[None, :] - q[:, None])
    return -slopes[:, None, None] * dist[None, :, :]



def hand_kerple(xp: Any, q: Any, k: Any, scale: Any, rate: Any) -> Any:
    """KERPLE's log kernel (Chi et al. 2022): ``-r1_h · log(1 + r2_h · |q - k|)`` with
    ``r = softplus(param)`` written plainly (the params are small)."""
    r1 = xp.log1p(xp.exp(scale))[:, None, None]
    r2 = xp.log1p(xp.exp(rate))[:, None, None]
    return -r1 * xp.log1p(r2 * xp.abs(k[None, :] - q[:, None])[None, :, :])


def hand_fire(xp: Any, q: Any, k: Any, p: dict[str, Any], init_L: float) -> Any:
    """FIRE (Li et al. 2023, the appendix's listing): ``MLP(log(|c(i-j)| + 1) / (log(|c·max(i,
    L)| + 1) + 1e-6))`` with ``L = |L_multiplier·init_L|``, positions as floats."""
    c = p["c"]
    threshold = xp.abs(p["L_multiplier"] * init_L)
    rel = xp.log(xp.abs(c * (q[:, None] - k[None, :])) + 1.0)
    norm = xp.log(xp.abs(c * xp.where(q > threshold, q, threshold)) + 1.0)[:, None] + 1e-6
    pre = (rel / norm)[..., None] * p["w1"][:, 0] + p["b1"]
    hidden = xp.where(pre > 0, pre, xp.zeros_like(pre))  # ReLU
    return xp.moveaxis(hidden @ p["w2"].T + p["b2"], -1, 0)


def hand_dual_chunk(xp: Any, q: Any, k: Any, chunk_size: int, local_size: int,
                    theta: float = 10000.0) -> tuple[Any, ...]:
    """Dual chunk attention RoPE as vLLM's ``DualChunkRotaryEmbedding`` gives it at positions
    ``0..seq-1`` (GPT-NeoX pairs): the queries turned for their own chunk, the chunk before,
    older chunks and the two sparse-attention estimates, then the keys."""
    seq, dim = q.shape[-2], q.shape[-1]
    chunk_len = chunk_size - local_size
    inv_freq = theta ** (-xp.arange(0, dim, 2, dtype=xp.float32) / dim)
    r = xp.arange(seq, dtype=xp.float32) % chunk_len
    half = dim // 2

    def rotate(x: Any, pos: Any) -> Any:
        freqs = pos[:, None] * inv_freq[None, :]
        emb = xp.concat((freqs, freqs), axis=-1)
        rotated = xp.concat((-x[..., half:], x[..., :half]), axis=-1)
        return x * xp.cos(emb) + rotated * xp.sin(emb)

    inter = xp.full((seq,), float(min(2 * chunk_len - 1, chunk_size)), dtype=xp.float32)
    return (rotate(q, r), rotate(q, xp.clip(r + chunk_len, 0, chunk_size)), rotate(q, inter),
            rotate(q, r + chunk_len), rotate(q, r + chunk_size), rotate(k, r))
