"""The rotary options of a Hugging Face text config: theta, head dim, partial rotary, scaling
with the defaults transformers 5.23 derives (``modeling_rope_utils``), M-RoPE sections."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._conventions import conventions_of
from ._engine_mrope import EngineMRope, engine_mrope
from ._values import ConfigError, flag, integer, integers, number

__all__ = ["ConfigError", "rotary_options"]

#: Keys of ``rope_parameters`` that are encoder options or M-RoPE settings, not scaling ones.
_NOT_SCALING = frozenset({"rope_type", "type", "rope_theta", "partial_rotary_factor",
                          "mrope_section", "xdrope_section", "mrope_interleaved"})
#: Types whose ``original_max_position_embeddings`` transformers fills (standardize_rope_params).
_NEED_ORIGINAL = ("llama3", "yarn", "longrope")


def _number(config: Mapping[str, Any], *keys: str) -> Any:
    return _found(config, *keys)[1]


def _found(config: Mapping[str, Any], *keys: str) -> tuple[str, Any]:
    """``(key, value)`` of the first of ``keys`` the config sets (``(keys[0], None)``: none)."""
    for key in keys:
        value = config.get(key)
        if value is not None:
            return key, value
    return keys[0], None


#: Names of the attention head's width, after DeepSeek MLA's ``qk_rope_head_dim``: the
#: config's ``head_dim`` property reads them in Zamba2 (``attention_head_dim``) and JetMoe
#: (``kv_channels``), where ``hidden_size // num_attention_heads`` is another number.
_HEAD_DIM_KEYS = ("head_dim", "attention_head_dim", "kv_channels")


def head_dim(config: Mapping[str, Any], model_type: str,
             where: str | None = None) -> int:
    """DeepSeek MLA's ``qk_rope_head_dim``, else ``head_dim`` (``attention_head_dim``,
    ``kv_channels``), else ``hidden_size // num_attention_heads`` (transformers' rule; the
    GPT-J/GPT-2 names ``n_embd``/``n_head`` too)."""
    where = where or f"from_hf_config (model type {model_type!r})"
    # [nope | rope] heads (DeepSeek-V4) are head_dim wide, their last qk_rope_head_dim rotate
    last = conventions_of(model_type).get("rotary_features") == "last"
    key, value = _found(config, *(_HEAD_DIM_KEYS if last
                                  else ("qk_rope_head_dim", *_HEAD_DIM_KEYS)))
    if value is not None:
        return integer(value, key, where)
    hidden_key, hidden = _found(config, "hidden_size", "n_embd", "d_model")
    heads_key, heads = _found(config, "num_attention_heads", "n_head", "num_heads", "n_heads",
                              "decoder_num_attention_heads")  # Moonshine's text decoder
    if hidden is None or heads is None:
        missing = "hidden_size" if hidden is None else "num_attention_heads"
        raise ConfigError(f"{where}: the config has no 'head_dim' and no {missing!r}: the "
                          f"head dimension of its rotary embedding is unknown")
    return integer(hidden, hidden_key, where) // integer(heads, heads_key, where)


def _theta(rope: Mapping[str, Any], config: Mapping[str, Any], model_type: str,
           default_theta: float | None, where: str) -> float:
    key, value = _found(rope, "rope_theta")
    if value is None:
        key, value = _found(config, "rope_theta", "rotary_emb_base")
    if value is None:
        return float(default_theta if default_theta is not None
                     else conventions_of(model_type).get("theta", 10000.0))
    return number(value, key, where)


def _consumes_partial(kind: str, registered: Mapping[str, Any]) -> bool:
    """Whether the scaling type ``kind`` takes ``partial_rotary_factor`` as its own parameter
    (``proportional``: the unrotated pairs stay inside the full-width half layout) instead of
    it meaning a smaller ``rotary_dim``."""
    from ..rope.scalings import as_scaling, parameter_options

    return kind in registered and "partial_rotary_factor" in parameter_options(
        as_scaling(registered[kind]))


def _rotary_dim(rope: Mapping[str, Any], config: Mapping[str, Any], model_type: str,
                dim: int, where: str) -> int:
    reads = conventions_of(model_type).get("reads_rotary_dim", True)
    if reads and config.get("rotary_dim") is not None:  # GPT-J, CodeGen: a count of features
        return integer(config["rotary_dim"], "rotary_dim", where)
    key, factor = _found(rope, "partial_rotary_factor")
    if factor is None:
        key, factor = _found(config, "partial_rotary_factor", "rotary_pct")
    factor = (conventions_of(model_type).get("partial_rotary_factor", 1.0) if factor is None
              else number(factor, key, where))
    if factor > 1:
        raise ConfigError(f"{where}: {key}={factor!r} must be in (0, 1]")
    mla, full = config.get("qk_rope_head_dim"), config.get("head_dim")
    if mla is not None and full is not None and dim == mla \
            and int(integer(full, "head_dim", where) * factor) == dim:
        return dim  # Mistral 4: the factor is of the whole head; the rope part rotates whole
    return int(dim * factor)  # transformers' own rule: int(head_dim * partial_rotary_factor)


def _flag(config: Mapping[str, Any], key: str, where: str) -> bool | None:
    value = config.get(key)
    if value is not None and not isinstance(value, bool):
        raise ConfigError(f"{where}: {key}={value!r} must be true or false")
    return value


def _layout(config: Mapping[str, Any], model_type: str, where: str) -> str:
    """The pair layout: the family's fixed one (its code reads no key), else the config's
    ``rope_interleave`` wherever it appears (DeepSeek-V3, AXK1, Youtu, ...: the attention calls
    ``apply_rotary_pos_emb_interleave`` when it is true), else the family's default for it."""
    conv = conventions_of(model_type)
    if "layout" in conv:
        return str(conv["layout"])
    key, default = conv.get("layout_flag", ("rope_interleave", False))
    value = _flag(config, key, where)
    return "interleaved" if (default if value is None else value) else "half"


def _mrope_interleaved(rope: Mapping[str, Any], config: Mapping[str, Any],
                       model_type: str, where: str) -> bool:
    """Whether M-RoPE cycles its axes over the pairs. transformers' modeling code reads no
    key for it: a family the table lists as M-RoPE does what its code does (the table says
    so); for any other, the config's ``mrope_interleaved`` (vLLM's reading of it) decides."""
    conv = conventions_of(model_type)
    if "mrope_interleaved" in conv or "mrope_section" in conv:
        return bool(conv.get("mrope_interleaved", False))
    value = _flag(rope, "mrope_interleaved", where)
    if value is None:
        value = _flag(config, "mrope_interleaved", where)
    return bool(value)


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
    if max_pos is not None:
        max_pos = integer(max_pos, "max_position_embeddings", where)
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
                   where: str, default_theta: float | None, registered: Mapping[str, Any],
                   engine: str = "transformers") -> tuple[str, dict[str, Any]]:
    """``(encoder name, options)`` for the rotary settings ``rope`` (one layer type's flat
    ``rope_parameters``, or the 4.x ``rope_scaling`` with ``rope_theta`` beside it), as
    ``engine`` (``from_hf_config``'s) reads them."""
    dim = head_dim(config, model_type, where)
    theta = _theta(rope, config, model_type, default_theta, where)
    kind_key, kind = _found(rope, "rope_type", "type")
    if kind is None:
        kind = "default"
    elif not isinstance(kind, str):
        raise ConfigError(f"{where}: {kind_key}={kind!r} must be a string (a rope type)")
    if kind == "mrope":  # Qwen2-VL's 4.x configs: transformers reads it as "default"
        kind = "default"
    kind = str(conventions_of(model_type).get("rope_type_aliases", {}).get(kind, kind))
    branch = engine_mrope(kind, rope, config, engine=engine, where=where)
    if branch is not None:  # a serving engine's own M-RoPE branch
        kind = branch.kind
    alpha = _number(rope, "alpha")
    if kind == "dynamic" and alpha and conventions_of(model_type).get("ntk_alpha"):
        # HunYuan's compute_ntk_alpha_rope_parameters: a fixed alpha only stretches the base
        theta *= number(alpha, "alpha", where) ** (dim / (dim - 2))
        kind = "default"
    rotary_dim = (dim if _consumes_partial(kind, registered)
                  else _rotary_dim(rope, config, model_type, dim, where))
    scaling = (branch.scaling if branch is not None
               else _scaling(kind, rope, config, where, registered))
    layout = _layout(config, model_type, where)
    conv = conventions_of(model_type)
    common = {"dim": dim, "theta": theta, "layout": layout, "scaling": scaling,
              "rotary_dim": None if rotary_dim == dim else rotary_dim,
              **{k: conv[k] for k in ("rotary_features", "direction") if k in conv}}
    common.update(temperature(config, conv.get("attn_temperature"), where))
    # HunYuan-VL's checkpoints name it xdrope_section (its config class renames it)
    key, sections = _found(rope, "mrope_section", "xdrope_section")
    if sections is None:
        key, sections = "MODEL_CONVENTIONS mrope_section", conv.get("mrope_section")
    if sections is None:
        return "rotary", common
    out = {**common, "sections": integers(sections, key, where),
           "interleaved": _mrope_interleaved(rope, config, model_type, where)}
    if branch is not None:
        return "mrope", _engine_pairs(branch, out, where)
    mapper = conv.get("mrope_map")
    if mapper is not None:  # the family's own axis-to-pair map (Ernie-4.5-VL)
        out["sections"], out["pair_axes"] = mapper(list(out["sections"]))
    features = conv.get("feature_map")
    if features is not None:  # the family's own axis of every feature (HunYuan-VL)
        out["sections"], out["feature_axes"] = features(list(out["sections"]))
    return "mrope", out


def _engine_pairs(branch: EngineMRope, out: dict[str, Any], where: str) -> dict[str, Any]:
    """``out`` with an engine branch's own pair map or interleaving."""
    if branch.interleaved is not None:
        out["interleaved"] = branch.interleaved
    if branch.pair_map is not None:
        try:
            out["sections"], out["pair_axes"] = branch.pair_map(tuple(out["sections"]))
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    return out


def temperature(config: Mapping[str, Any], defaults: Mapping[str, Any] | None,
                 where: str) -> dict[str, Any]:
    """Llama 4's attention temperature options, for a family whose modeling code reads them
    (``defaults``: its config class's values, used where the config has none)."""
    if defaults is None:
        return {}
    def read(key: str) -> Any:
        value = config.get(key)
        return defaults[key] if value is None else value
    if not flag(read("attn_temperature_tuning"), "attn_temperature_tuning", where):
        return {}
    return {"attn_temperature_tuning": True,
            "floor_scale": number(read("floor_scale"), "floor_scale", where),
            "attn_scale": number(read("attn_scale"), "attn_scale", where, positive=False)}
