"""DeepSeek-V4's rope per layer label (``main``: sliding-window layers, ``compress``: layers with
a compressor), as transformers' ``DeepseekV4Config`` derives it from a ``config.json`` and as vLLM
builds it (``engine="vllm"``): transformers scales the compressed layers only, vLLM every layer
(docs/porting.md, "Serving engines")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._values import ConfigError, integer, mapping, number

__all__ = ["transformers_labels", "vllm_deepseek_v4"]

#: ``DeepseekV4Config``'s class defaults.
_THETA, _COMPRESS_THETA, _PARTIAL = 10000.0, 160000.0, 64 / 512


def transformers_labels(text: Mapping[str, Any]) -> Mapping[str, Any]:
    """``text`` with its flat rope settings (a ``config.json``'s ``rope_scaling``) split by label
    as transformers 5.23's ``DeepseekV4Config.__post_init__`` splits them: ``main`` the default
    rope at ``rope_theta``; ``compress`` the config's scaling at ``compress_rope_theta``, YaRN
    with ``attention_factor`` 1 unless given (the reference never multiplies cos/sin by YaRN's
    mscale); both with ``partial_rotary_factor``, else ``qk_rope_head_dim / head_dim``. Nested
    settings are returned as they are."""
    rp = text.get("rope_parameters") or text.get("rope_scaling") or {}
    if not isinstance(rp, Mapping) or (isinstance(rp.get("main"), Mapping)
                                       and isinstance(rp.get("compress"), Mapping)):
        return text
    scaled = {k: v for k, v in rp.items() if k not in ("main", "compress", "type")}
    kind = rp.get("rope_type", rp.get("type", "default"))
    part = text.get("partial_rotary_factor")
    if part is None:  # the legacy qk_rope_head_dim / head_dim, else the class's 64/512
        rope, head = text.get("qk_rope_head_dim"), text.get("head_dim")
        part = rope / head if rope is not None and head else _PARTIAL
    main = {"rope_type": "default", "rope_theta": text.get("rope_theta") or _THETA,
            "partial_rotary_factor": part}
    compress = {**scaled, "rope_type": kind, "partial_rotary_factor": part,
                "rope_theta": text.get("compress_rope_theta") or _COMPRESS_THETA}
    if kind == "yarn":
        compress.setdefault("attention_factor", 1.0)
    return {**text, "rope_scaling": None, "rope_parameters": {"main": main, "compress": compress}}


def vllm_deepseek_v4(text: Mapping[str, Any], layer_type: Any, head: int,
                     where: str) -> dict[str, Any]:
    """vLLM's DeepSeek-V4 layers (``models/deepseek_v4``: ``rope_theta`` or, on compressed
    layers, ``compress_rope_theta``; every scaled layer ``deepseek_yarn`` with
    ``is_deepseek_v4``, ``mscale = mscale_all_dim = 0``, ``rope_dim = qk_rope_head_dim``,
    ``is_neox_style=False``): ``DeepseekV4ScalingRotaryEmbedding``, the last ``rope_dim``
    features of the head, on the main layers too (transformers leaves those unscaled)."""
    if layer_type not in ("main", "compress"):
        raise ConfigError(f"{where}: with engine='vllm' DeepSeek-V4's layers differ by their "
                          f"compress ratio: pass layer_type='main' or 'compress', got "
                          f"{layer_type!r}")
    rope = text.get("rope_parameters") or text.get("rope_scaling") or {}
    rope = mapping(rope, "rope_parameters", where)
    if isinstance(rope.get(layer_type), Mapping):  # newer checkpoints: one dict per label
        rope = rope[layer_type]
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ("yarn", "deepseek_yarn"):
        raise ConfigError(f"{where}: vLLM's DeepSeek-V4 branch is YaRN-scaled; the config's "
                          f"rope type is {kind!r}")
    theta_key = "compress_rope_theta" if layer_type == "compress" else "rope_theta"
    if text.get(theta_key) is None:
        raise ConfigError(f"{where}: DeepSeek-V4's {layer_type} layers need {theta_key!r}")
    rd = text.get("qk_rope_head_dim")
    rotary_dim = (integer(rd, "qk_rope_head_dim", where) if rd is not None
                  else int(head * number(text.get("partial_rotary_factor", 64 / 512),
                                         "partial_rotary_factor", where)))
    scaling = {"type": "deepseek-yarn", "mscale": 0.0, "mscale_all_dim": 0.0,
               **{k: rope[k] for k in ("factor", "original_max_position_embeddings",
                                       "beta_fast", "beta_slow", "attn_factor",
                                       "extrapolation_factor") if rope.get(k) is not None}}
    return {"dim": head, "theta": number(text[theta_key], theta_key, where),
            "rotary_dim": None if rotary_dim == head else rotary_dim, "layout": "interleaved",
            "rotary_features": "last", "scaling": scaling}
