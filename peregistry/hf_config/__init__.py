"""From a Hugging Face config to the encoder that reproduces the model's positional encoding.

:func:`from_hf_config` takes a transformers ``PretrainedConfig`` (read through its ``to_dict()``:
transformers is never imported here) or the plain dict of a ``config.json``. What the config does
not say but the model's code does (GPT-J rotates interleaved pairs, Qwen3-VL interleaves its
M-RoPE axes, ...) is in one table, :data:`MODEL_CONVENTIONS`, that
:func:`register_model_conventions` extends.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ._conventions import (
    MODEL_CONVENTIONS,
    conventions_of,
    encoding_of,
    register_model_conventions,
    unregister_model_conventions,
)
from ._deepseek_v4 import transformers_labels, vllm_deepseek_v4
from ._engines import engine_branch
from ._layers import NoPositionalEncodingError, layer_overrides, layer_rope
from ._rope import head_dim, rotary_options, temperature
from ._values import ConfigError, integer, number

if TYPE_CHECKING:
    from ..kinds.base import Encoder

__all__ = [
    "MODEL_CONVENTIONS",
    "ConfigError",
    "NoPositionalEncodingError",
    "from_hf_config",
    "register_model_conventions",
    "unregister_model_conventions",
]

#: Keys whose presence says "rotary" for a model type the table does not list.
_ROPE_KEYS = ("rope_parameters", "rope_theta", "rope_scaling", "rotary_dim", "rotary_pct",
              "partial_rotary_factor", "qk_rope_head_dim", "rotary_emb_base")
#: ALiBi's default ``max_bias`` (the paper's 8), MPT's ``alibi_bias_max``.
_ALIBI_MAX_BIAS = 8


def _as_dict(config: Any) -> tuple[dict[str, Any], float | None]:
    """The config as a dict, and the text config class's ``default_theta`` if it has one."""
    if isinstance(config, Mapping):
        return dict(config), None
    to_dict = getattr(config, "to_dict", None)
    if to_dict is None:
        raise TypeError(f"from_hf_config: config must be a transformers PretrainedConfig or the "
                        f"dict of a config.json, got {type(config).__name__}")
    text = getattr(config, "text_config", None)
    if text is None:
        text = getattr(getattr(config, "thinker_config", None), "text_config", None)
    theta = getattr(type(text if text is not None else config), "default_theta", None)
    raw = _with_aliases(dict(to_dict()), config)
    thinker = raw.get("thinker_config")
    for holder, obj in ((raw, config),
                        (thinker, getattr(config, "thinker_config", None))):
        if isinstance(holder, dict) and isinstance(holder.get("text_config"), Mapping):
            holder["text_config"] = _with_aliases(dict(holder["text_config"]),
                                                  getattr(obj, "text_config", None))
    return raw, (float(theta) if isinstance(theta, (int, float)) else None)


def _with_aliases(d: dict[str, Any], config: Any) -> dict[str, Any]:
    """``d`` with the config class's ``attribute_map`` aliases that ``to_dict()`` leaves out
    (Moonshine: ``num_attention_heads`` is ``decoder_num_attention_heads``)."""
    aliases = getattr(config, "attribute_map", None)
    if isinstance(aliases, Mapping):
        for alias, key in aliases.items():
            if d.get(alias) is None and d.get(key) is not None:
                d[alias] = d[key]
    return d


def _text_config(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """The text config of a composite (vision-language, omni) config, else the config."""
    thinker = raw.get("thinker_config")
    text = thinker.get("text_config") if isinstance(thinker, Mapping) else None
    if isinstance(text, Mapping):
        return text
    text = raw.get("text_config")
    if isinstance(text, Mapping) and text:
        return text
    return raw


def _encoding(text: Mapping[str, Any], model_type: str, where: str) -> str:
    found = encoding_of(model_type, text)
    if found is not None:
        return found
    if text.get("relative_attention_num_buckets") is not None:
        return "t5"
    attn = text.get("attn_config")
    if text.get("alibi") is True or (isinstance(attn, Mapping) and attn.get("alibi")):
        return "alibi"  # Falcon's alibi=True, MPT's attn_config.alibi
    if any(text.get(k) is not None for k in _ROPE_KEYS) or model_type in MODEL_CONVENTIONS:
        return "rotary"
    raise ConfigError(f"{where}: found no positional-encoding settings (none of "
                      f"{', '.join(_ROPE_KEYS)}, relative_attention_num_buckets, alibi) and the "
                      f"model type is not in peregistry.hf_config.MODEL_CONVENTIONS; register it "
                      f"with register_model_conventions() or build the encoder by name")


def _heads(text: Mapping[str, Any], where: str) -> int:
    for key in ("num_attention_heads", "num_heads", "n_head", "n_heads"):
        if text.get(key) is not None:
            return integer(text[key], key, where)
    raise ConfigError(f"{where}: the config has no head count (num_attention_heads, "
                      f"num_heads, n_head or n_heads)")


def _t5(text: Mapping[str, Any], layer_type: Any, where: str) -> dict[str, Any]:
    stack = layer_type
    if stack is None and text.get("is_decoder"):
        stack = "decoder"
    if stack is None and text.get("is_encoder_decoder") is False:
        stack = "encoder"
    if stack not in ("encoder", "decoder"):
        got = "" if stack is None else f" (got layer_type={stack!r})"
        raise ConfigError(f"{where}: T5's encoder and decoder differ (bidirectional buckets in "
                          f"the encoder, causal in the decoder); pass layer_type='encoder' or "
                          f"'decoder'{got}")
    # T5Config's defaults (32, 128) only where the config has no value: 0 stays 0
    buckets = text.get("relative_attention_num_buckets")
    distance = text.get("relative_attention_max_distance")
    return {"num_heads": _heads(text, where),
            "num_buckets": 32 if buckets is None else integer(
                buckets, "relative_attention_num_buckets", where),
            "max_distance": 128 if distance is None else integer(
                distance, "relative_attention_max_distance", where),
            "bidirectional": stack == "encoder"}


def _alibi(text: Mapping[str, Any], where: str) -> dict[str, Any]:
    attn = text.get("attn_config")
    max_bias = attn.get("alibi_bias_max") if isinstance(attn, Mapping) else None
    heads = _heads(text, where)
    if isinstance(attn, Mapping) and heads & (heads - 1):
        # MPT (build_mpt_alibi_tensor) interleaves the slopes of the next power of two.
        raise ConfigError(f"{where}: MPT's ALiBi slopes for {heads} heads (not a power of two) "
                          f"follow MPT's own rule, not the paper's that 'alibi' uses")
    out: dict[str, Any] = {"num_heads": heads}
    if max_bias is not None and max_bias != _ALIBI_MAX_BIAS:
        out["max_bias"] = number(max_bias, "attn_config.alibi_bias_max", where)  # MPT's
    return out


#: The readings of a config ``from_hf_config`` reproduces (its ``engine`` argument).
_ENGINES = ("transformers", "vllm", "sglang")


def from_hf_config(config: Any, *, layer_type: str | int | None = None,
                   engine: str = "transformers") -> Encoder:
    """The encoder that reproduces the positional encoding of a Hugging Face model.

    ``config`` is a transformers ``PretrainedConfig`` or the dict of a ``config.json``; composite
    configs use their text config. ``layer_type`` names a layer type (``"sliding_attention"``,
    T5's ``"encoder"``/``"decoder"``) or a layer index; it is needed when the layers differ.
    A layer without positional encoding raises :class:`NoPositionalEncodingError`; unknown
    rope types and missing keys raise :class:`ConfigError` (a ``ValueError``) naming them.
    ``engine`` is whose reading of the config to reproduce where vLLM's or SGLang's
    ``get_rope`` differs from transformers' (docs/porting.md, "Serving engines"): keys only an
    engine reads are read as that engine reads them whatever ``engine`` says (``use_fope``:
    FoPE's ``sin`` padding 0, vLLM's and the newest, unless ``engine="sglang"``: 1); with
    ``"vllm"`` DeepSeek-V4's layers (``layer_type="main"`` or ``"compress"``) are YaRN-scaled
    as vLLM's ``DeepseekV4ScalingRotaryEmbedding`` scales them.
    """
    from ..rope.scalings import registered_scalings

    if engine not in _ENGINES:
        raise ValueError(f"from_hf_config: engine={engine!r} is not one of "
                         f"{', '.join(map(repr, _ENGINES))}")
    raw, default_theta = _as_dict(config)
    text = _text_config(raw)
    model_type = str(text.get("model_type") or raw.get("model_type") or "unknown")
    where = f"from_hf_config (model type {model_type!r})"
    if engine == "vllm" and model_type == "deepseek_v4":  # YaRN on every layer, by label
        return _build(where, "rotary", vllm_deepseek_v4(
            text, layer_type, head_dim(text, model_type, where), where))
    reason = conventions_of(model_type).get("unsupported")
    if reason:
        raise ConfigError(f"{where}: not supported: {reason} (see "
                          f"peregistry.hf_config.MODEL_CONVENTIONS)")
    encoding = _encoding(text, model_type, where)
    if encoding == "t5":
        return _build(where, "t5", _t5(text, layer_type, where))
    if encoding == "alibi":
        return _build(where, "alibi", _alibi(text, where))
    if model_type == "deepseek_v4":  # a config.json's flat rope, split as its config class does
        text = transformers_labels(text)
    interval = conventions_of(model_type).get("no_rope_layer_interval")
    if interval is not None and text.get("no_rope_layer_interval") is None:
        text = {**text, "no_rope_layer_interval": interval}  # the class default
    try:
        rope = layer_rope(text, layer_type, where, model_type,
                          loaded=not isinstance(config, Mapping))
    except NoPositionalEncodingError as exc:
        if not temperature(text, conventions_of(model_type).get("attn_temperature"),
                                 where):
            raise
        raise NoPositionalEncodingError(
            f"{str(exc).removesuffix('; its attention needs no encoder')}; its queries are "
            f"scaled by Llama 4's attention temperature (attn_temperature_tuning): "
            f"enc.query_scale(positions) of a RoPE layer's encoder gives the factors") from None
    text = {**text, **layer_overrides(text, layer_type, where)}  # Gemma 4's global head_dim
    name, options = rotary_options(rope, text, model_type, where=where,
                                   default_theta=default_theta,
                                   registered=registered_scalings(), engine=engine)
    name, options = engine_branch(text, rope, model_type, name, options, engine=engine,
                                  where=where)  # branches only the engines have
    return _build(where, name, options)


def _build(where: str, name: str, options: dict[str, Any]) -> Encoder:
    """The encoder; options it refuses (a scaling's factor of 0, T5's 0 buckets) are a
    :class:`ConfigError` giving the encoder's own message, which names the option and value."""
    from ..registry import default_registry

    try:
        return default_registry.get_encoder(name, **options)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{where}: the config's values are refused by {name!r}: {exc}") \
            from exc
