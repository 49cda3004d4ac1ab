"""The serving engines' readings of a config where transformers has none (issue 46): vLLM's and
SGLang's FoPE (``use_fope``) and dual chunk attention (``dual_chunk_attention_config``), Grok-1's
top-level scaling keys, DeepSeek's ``apply_yarn_scaling`` (vLLM's ``deepseek_llama_scaling``; with ``engine="vllm"``
its ``deepseek_yarn`` too, whose attention factor rule differs from transformers'),
Llama 4's vision rotary (``mllama4``), each read as the engine's dispatcher reads it;
``engine`` picks the engine where they differ (docs/porting.md, "Serving engines"). DeepSeek-V4's
layers are in :mod:`._deepseek_v4`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._values import ConfigError, flag, integer, mapping, number

__all__ = ["engine_branch"]

#: Model types vLLM serves with ``models/deepseek_v2.py``, which renames a scaled rope type
#: ``deepseek_yarn`` or, with ``apply_yarn_scaling`` false, ``deepseek_llama_scaling``.
_DEEPSEEK = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2")
#: Grok-1's architectures (vLLM ``models/grok1.py``), whose ``get_rope_scaling`` reads the
#: config's top-level ``rope_type`` as the method.
_GROK = ("Grok1ForCausalLM", "Grok1ModelForCausalLM")
#: Llama 4's vision tower (vLLM ``models/mllama4.py``: ``rope_type="mllama4"``).
_LLAMA4_VISION = "llama4_vision_model"


def engine_branch(text: Mapping[str, Any], rope: Mapping[str, Any], model_type: str,
                  name: str, options: dict[str, Any], *, engine: str,
                  where: str) -> tuple[str, dict[str, Any]]:
    """``(name, options)`` after the engines' branches; unchanged where none applies."""
    dca = text.get("dual_chunk_attention_config")
    if dca is not None:  # both engines test it before any rope type
        return "dual-chunk", _dual_chunk(mapping(dca, "dual_chunk_attention_config", where),
                                         name, options, where)
    if rope.get("use_fope") is not None and flag(rope["use_fope"], "use_fope", where):
        return "fope", _fope(text, rope, name, options, engine=engine, where=where)
    if model_type == _LLAMA4_VISION:
        return "mrope", _llama4_vision(options, where)
    if _is_grok(text):
        return name, {**options, "scaling": _grok1(text, options, where)}
    scaling = options.get("scaling")
    if model_type in _DEEPSEEK and scaling is not None and scaling["type"] == "yarn":
        key = rope.get("apply_yarn_scaling")
        apply = key is None or flag(key, "apply_yarn_scaling", where)
        if not apply or engine == "vllm":  # transformers reads no apply_yarn_scaling
            return name, {**options, "scaling": _deepseek(rope, scaling, apply=apply)}
    return name, options


def _unscaled(name: str, options: Mapping[str, Any], branch: str, where: str) -> None:
    if name != "rotary" or options.get("scaling") is not None:
        scaling = options.get("scaling")
        what = f"rope type {scaling['type']!r}" if scaling else "M-RoPE sections"
        raise ConfigError(f"{where}: {branch} together with {what}: vLLM and SGLang build "
                          f"{branch} and drop it; peregistry refuses rather than drop it")


def _dual_chunk(dca: Mapping[str, Any], name: str, options: Mapping[str, Any],
                where: str) -> dict[str, Any]:
    """vLLM/SGLang ``DualChunkRotaryEmbedding``: ``chunk_size`` and ``local_size`` of the
    config's ``dual_chunk_attention_config`` (its ``original_max_position_embeddings`` is the
    attention's length scaling)."""
    _unscaled(name, options, "dual_chunk_attention_config", where)
    out = {k: options[k] for k in ("dim", "theta", "rotary_dim", "layout")}
    for key in ("chunk_size", "local_size"):
        if dca.get(key) is None:
            raise ConfigError(f"{where}: dual_chunk_attention_config has no {key!r}")
        out[key] = integer(dca[key], f"dual_chunk_attention_config.{key}", where, minimum=0)
    orig = dca.get("original_max_position_embeddings")
    if orig is not None:
        out["original_max_position_embeddings"] = integer(
            orig, "dual_chunk_attention_config.original_max_position_embeddings", where)
    return out


def _fope(text: Mapping[str, Any], rope: Mapping[str, Any], name: str,
          options: Mapping[str, Any], *, engine: str, where: str) -> dict[str, Any]:
    """``FourierRotaryEmbedding``: vLLM reads ``num_key_value_heads``, ``num_inv_freq``,
    ``fope_sep_head``, ``fope_init_factor`` from the rope parameters; SGLang ``num_kv_heads``
    and the same, with defaults ``fope_sep_head=True``, ``fope_init_factor=0.1``. The clipped
    pairs' ``sin`` is 0 in vLLM (``engine="transformers"`` too: the newest reference, as
    transformers has no FoPE) and 1 in SGLang."""
    _unscaled(name, options, "use_fope", where)
    if options.get("rotary_dim") is not None:
        raise ConfigError(f"{where}: use_fope with partial rotary (rotary_dim="
                          f"{options['rotary_dim']}): fope rotates the whole head")
    if text.get("max_position_embeddings") is None:
        raise ConfigError(f"{where}: use_fope needs max_position_embeddings (FoPE clips the "
                          f"frequencies slower than one period over it)")
    sep = rope.get("fope_sep_head")
    out: dict[str, Any] = {
        "dim": options["dim"], "theta": options["theta"], "layout": options["layout"],
        "max_position_embeddings": integer(text["max_position_embeddings"],
                                           "max_position_embeddings", where),
        "sep_head": True if sep is None else flag(sep, "fope_sep_head", where),
        "sin_padding": 1 if engine == "sglang" else 0,
    }
    if rope.get("num_inv_freq") is not None:
        out["num_inv_freq"] = integer(rope["num_inv_freq"], "num_inv_freq", where)
    if rope.get("fope_init_factor") is not None:
        out["init_factor"] = number(rope["fope_init_factor"], "fope_init_factor", where,
                                    positive=False)
    if out["sep_head"]:
        key = next((k for k in ("num_key_value_heads", "num_kv_heads") if rope.get(k) is not None),
                   None)
        source = rope if key is not None else text
        key = key or "num_key_value_heads"
        if source.get(key) is None:
            raise ConfigError(f"{where}: use_fope with fope_sep_head needs the KV head count "
                              f"(num_key_value_heads or num_kv_heads)")
        out["num_kv_heads"] = integer(source[key], key, where)
    return out


def _llama4_vision(options: Mapping[str, Any], where: str) -> dict[str, Any]:
    """vLLM ``Llama4VisionRotaryEmbedding`` (``partial_rotary_factor=0.5``: ``d/4``
    frequencies per axis, pairs ``(2i, 2i+1)``): the ``axial`` bands of ``mrope``."""
    d = int(options["dim"])
    if d % 4:
        raise ConfigError(f"{where}: Llama 4's vision rotary needs a head dimension divisible "
                          f"by 4 (two axes of d/4 pairs), got {d}")
    return {"dim": d, "theta": options["theta"], "sections": (d // 4, d // 4),
            "layout": "interleaved", "scaling": {"type": "axial", "axes": 2}}


def _is_grok(text: Mapping[str, Any]) -> bool:
    arch = text.get("architectures") or ()
    return isinstance(text.get("rope_type"), str) and any(a in _GROK for a in arch)


def _grok1(text: Mapping[str, Any], options: Mapping[str, Any],
           where: str) -> dict[str, Any]:
    """vLLM ``models/grok1.py`` ``get_rope_scaling``: the top-level ``rope_type`` is the
    method, with ``scaling_factor``, ``original_max_position_embeddings``,
    ``extrapolation_factor``, ``beta_fast``, ``beta_slow`` (``attn_factor`` feeds a magnitude
    scale Grok-1 never applies)."""
    if options.get("scaling") is not None:
        raise ConfigError(f"{where}: Grok-1's top-level rope_type with a rope_scaling too: "
                          f"vLLM reads only the top-level keys")
    out: dict[str, Any] = {"type": "grok1", "extra_method": text["rope_type"]}
    for key, ours in (("scaling_factor", "factor"),
                      ("original_max_position_embeddings", "original_max_position_embeddings")):
        if text.get(key) is None:
            raise ConfigError(f"{where}: Grok-1's rope_type {text['rope_type']!r} needs "
                              f"{key!r} (vLLM's Grok1ScalingRotaryEmbedding reads it)")
        out[ours] = text[key]
    for key in ("extrapolation_factor", "beta_fast", "beta_slow"):
        if text.get(key) is not None:
            out[key] = text[key]
    return out


def _deepseek(rope: Mapping[str, Any], scaling: Mapping[str, Any], *,
              apply: bool) -> dict[str, Any]:
    """vLLM ``DeepseekScalingRotaryEmbedding``'s keys (``deepseek_yarn``, or with ``apply``
    false ``deepseek_llama_scaling``: the same tables, no softmax-scale factor)."""
    out = {"type": "deepseek-yarn", "apply_yarn_scaling": apply,
           **{k: scaling[k] for k in ("factor", "original_max_position_embeddings",
                                      "beta_fast", "beta_slow") if scaling.get(k) is not None}}
    for key in ("mscale", "mscale_all_dim", "attn_factor", "extrapolation_factor"):
        if rope.get(key) is not None:
            out[key] = rope[key]
    return out
