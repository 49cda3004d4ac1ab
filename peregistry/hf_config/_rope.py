"""The rotary options of a Hugging Face text config: theta, head dim, partial rotary, scaling
with the defaults transformers 5.23 derives (``modeling_rope_utils``), M-RoPE sections."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._conventions import conventions_of

__all__ = ["ConfigError", "rotary_options"]

#: Keys of ``rope_parameters`` that are encoder options or M-RoPE settings, not scaling ones.
_NOT_SCALING = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor",
                          "mrope_section", "xdrope_section", "mrope_interleaved"})
#: Types whose ``original_max_position_embeddings`` transformers fills (standardize_rope_params).
_NEED_ORIGINAL = ("llama3", "yarn", "longrope")


class ConfigError(ValueError):
    """A config that lacks what its positional encoding needs, or asks for what peregistry
    does not have: the message names the key, the value and the model type."""


def _number(config: Mapping[str, Any], *keys: str) -> Any:
    for key in keys:
        value = config.get(key)
        if value is not None:
            return value
    return None


#: Names of the attention head's width, after DeepSeek MLA's ``qk_rope_head_dim``: the
#: config's ``head_dim`` property reads them in Zamba2 (``attention_head_dim``) and JetMoe
#: (``kv_channels``), where ``hidden_size // num_attention_heads`` is another number.
_HEAD_DIM_KEYS = ("head_dim", "attention_head_dim", "kv_channels")


def head_dim(config: Mapping[str, Any], model_type: str) -> int:
    """DeepSeek MLA's ``qk_rope_head_dim``, else ``head_dim`` (``attention_head_dim``,
    ``kv_channels``), else ``hidden_size // num_attention_heads`` (transformers' rule; the
    GPT-J/GPT-2 names ``n_embd``/``n_head`` too)."""
    # [nope | rope] heads (DeepSeek-V4) are head_dim wide, their last qk_rope_head_dim rotate
    last = conventions_of(model_type).get("rotary_features") == "last"
    value = _number(config, *(_HEAD_DIM_KEYS if last else ("qk_rope_head_dim", *_HEAD_DIM_KEYS)))
    if value is not None:
        return int(value)
    hidden = _number(config, "hidden_size", "n_embd", "d_model")
    heads = _number(config, "num_attention_heads", "n_head", "num_heads", "n_heads",
                    "decoder_num_attention_heads")  # Moonshine's text decoder
    if hidden is None or heads is None:
        missing = "hidden_size" if hidden is None else "num_attention_heads"
        raise ConfigError(f"config of model type {model_type!r} has no 'head_dim' and no "
                          f"{missing!r}: the head dimension of its rotary embedding is unknown")
    return int(hidden) // int(heads)


def _theta(rope: Mapping[str, Any], config: Mapping[str, Any], model_type: str,
           default_theta: float | None) -> float:
    value = _number(rope, "rope_theta")
    if value is None:
        value = _number(config, "rope_theta", "rotary_emb_base")
    if value is None:
        value = default_theta
    if value is None:
        value = conventions_of(model_type).get("theta", 10000.0)
    return float(value)


def _consumes_partial(kind: str, registered: Mapping[str, Any]) -> bool:
    """Whether the scaling type ``kind`` takes ``partial_rotary_factor`` as its own parameter
    (``proportional``: the unrotated pairs stay inside the full-width half layout) instead of
    it meaning a smaller ``rotary_dim``."""
    from ..rope.scalings import as_scaling, parameter_options

    return kind in registered and "partial_rotary_factor" in parameter_options(
        as_scaling(registered[kind]))


def _rotary_dim(rope: Mapping[str, Any], config: Mapping[str, Any], model_type: str,
                dim: int) -> int:
    reads = conventions_of(model_type).get("reads_rotary_dim", True)
    if reads and config.get("rotary_dim") is not None:  # GPT-J, CodeGen: a count of features
        return int(config["rotary_dim"])
    factor = _number(rope, "partial_rotary_factor")
    if factor is None:
        factor = _number(config, "partial_rotary_factor", "rotary_pct")
    if factor is None:
        factor = conventions_of(model_type).get("partial_rotary_factor", 1.0)
    mla, full = config.get("qk_rope_head_dim"), config.get("head_dim")
    if mla is not None and full is not None and dim == int(mla) \
            and int(int(full) * float(factor)) == dim:
        return dim  # Mistral 4: the factor is of the whole head; the rope part rotates whole
    return int(dim * float(factor))


def _layout(config: Mapping[str, Any], model_type: str) -> str:
    conv = conventions_of(model_type)
    flag = conv.get("layout_flag")
    if flag is not None:
        key, default = flag
        value = config.get(key)
        return "interleaved" if (default if value is None else value) else "half"
    return str(conv.get("layout", "half"))


def _scaling(kind: str, rope: Mapping[str, Any], config: Mapping[str, Any], where: str,
             registered: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ``scaling`` dict, with what transformers derives filled in; keys the type does not
    declare are dropped (transformers ignores them too, with a warning)."""
    from ..rope.scalings import as_scaling, parameter_options

    if kind == "default":
        return None
    if kind not in registered:
        raise ConfigError(f"{where}: rope_type {kind!r} is not a registered scaling type; "
                          f"registered: {', '.join(sorted(registered))} (plugins add types "
                          f"through the peregistry_rope_scalings hook)")
    declared = parameter_options(as_scaling(registered[kind]))
    params = {k: v for k, v in rope.items() if k in declared
              and (k not in _NOT_SCALING or k == "partial_rotary_factor")}
    max_pos = config.get("max_position_embeddings")
    if kind == "dynamic" and max_pos is not None:  # transformers: always max_position_embeddings
        params["original_max_position_embeddings"] = max_pos
    if kind in _NEED_ORIGINAL:
        if config.get("original_max_position_embeddings") is not None:  # Phi-3: takes priority
            params["original_max_position_embeddings"] = config["original_max_position_embeddings"]
        elif params.get("original_max_position_embeddings") is None and max_pos is not None:
            params["original_max_position_embeddings"] = max_pos
    if kind in ("yarn", "longrope") and params.get("factor") is None:
        orig = params.get("original_max_position_embeddings")
        if max_pos is not None and orig:
            params["factor"] = max_pos / orig
    return {"type": kind, **params}


def rotary_options(rope: Mapping[str, Any], config: Mapping[str, Any], model_type: str, *,
                   where: str, default_theta: float | None,
                   registered: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """``(encoder name, options)`` for the rotary settings ``rope`` (one layer type's flat
    ``rope_parameters``, or the 4.x ``rope_scaling`` with ``rope_theta`` beside it)."""
    dim = head_dim(config, model_type)
    theta = _theta(rope, config, model_type, default_theta)
    kind = rope.get("rope_type") or rope.get("type") or "default"
    if kind == "mrope":  # Qwen2-VL's 4.x configs: transformers reads it as "default"
        kind = "default"
    kind = str(conventions_of(model_type).get("rope_type_aliases", {}).get(kind, kind))
    alpha = _number(rope, "alpha")
    if kind == "dynamic" and alpha and conventions_of(model_type).get("ntk_alpha"):
        # HunYuan's compute_ntk_alpha_rope_parameters: a fixed alpha only stretches the base
        theta, kind = theta * float(alpha) ** (dim / (dim - 2)), "default"
    rotary_dim = (dim if _consumes_partial(kind, registered)
                  else _rotary_dim(rope, config, model_type, dim))
    scaling = _scaling(kind, rope, config, where, registered)
    layout = _layout(config, model_type)
    conv = conventions_of(model_type)
    common = {"dim": dim, "theta": theta, "layout": layout, "scaling": scaling,
              "rotary_dim": None if rotary_dim == dim else rotary_dim,
              **{k: conv[k] for k in ("rotary_features", "direction") if k in conv}}
    # HunYuan-VL's checkpoints name it xdrope_section (its config class renames it)
    sections = rope.get("mrope_section") or rope.get("xdrope_section") or conv.get(
        "mrope_section")
    if sections is None:
        return "rotary", common
    interleaved = _number(rope, "mrope_interleaved")
    if interleaved is None:
        interleaved = _number(config, "mrope_interleaved")
    if interleaved is None:
        interleaved = conventions_of(model_type).get("mrope_interleaved", False)
    out = {**common, "sections": tuple(int(s) for s in sections), "interleaved": bool(interleaved)}
    mapper = conv.get("mrope_map")
    if mapper is not None:  # the family's own axis-to-pair map (Ernie-4.5-VL)
        out["sections"], out["pair_axes"] = mapper(list(out["sections"]))
    features = conv.get("feature_map")
    if features is not None:  # the family's own axis of every feature (HunYuan-VL)
        out["sections"], out["feature_axes"] = features(list(out["sections"]))
    return "mrope", out
