"""What a Hugging Face config does not say but the model's code does, by ``model_type``: the
table :func:`~peregistry.hf_config.from_hf_config` reads, and the function plugins extend it with.

Each entry was found by reading that family's ``apply_rotary_pos_emb`` (or equivalent) in
transformers 5.23, ``models/<type>/modeling_<type>.py``:

* ``layout="interleaved"``: the family rotates pairs ``(2i, 2i+1)`` (``rotate_every_two``,
  ``x[..., 0::2]`` / ``x[..., 1::2]`` in ``rotate_half``, or ``torch.view_as_complex``);
* ``layout_flag``: the default of the config key that selects the interleaved layout, for
  configs without it (DeepSeek-V3's ``rope_interleave``: default True). The key itself is read
  for every model type whose entry fixes no ``layout``: a key that changes the rotation needs
  no entry;
* ``mrope_interleaved=True``: M-RoPE cycles the axes over the pairs (Qwen3-VL
  ``recomposition_frequencies``) without ``mrope_interleaved`` in the config;
* ``mrope_section``: the sections the rotary module assumes when the config has none;
* ``theta``: the config class's ``default_theta`` (used only when a config has no theta);
* ``partial_rotary_factor``: the config class's default when the config has none;
* ``encoding``: ``"rotary"`` (the default), ``"alibi"``, ``"t5"``, or a function of the text
  config dict returning one of them (Baichuan: ALiBi for the 13B models only);
* ``no_rope_layer_interval``: the class default of that key (Llama 4, SmolLM3: every 4th
  layer is NoPE when ``no_rope_layers`` is empty or absent);
* ``nope_layer_types``: ``(RoPE layers' type, NoPE layers' type)``: the ``layer_types`` the
  config class derives from ``no_rope_layers`` when a config has none (Llama 4's
  ``Llama4TextConfig``: ``"chunked_attention"`` and ``"full_attention"``), so that a
  ``config.json`` without ``layer_types`` takes the names its config object takes;
* ``mrope_map``: a function of the config's ``mrope_section`` returning ``(sections,
  pair_axes)`` for ``mrope`` (Ernie-4.5-VL's own axis-to-pair map);
* ``feature_map``: a function of the config's ``mrope_section`` returning ``(sections,
  feature_axes)`` for ``mrope`` (HunYuan-VL's XD-RoPE: an axis per feature);
* ``ntk_alpha=True``: ``rope_type="dynamic"`` with an ``alpha`` is HunYuan's fixed NTK alpha
  (``compute_ntk_alpha_rope_parameters``): ``θ' = θ·alpha^(d/(d-2))``, no sequence-length
  dependence;
* ``reads_rotary_dim=False``: the family's code ignores a ``rotary_dim`` in its config
  (MiniMax-M3);
* ``rotary_features="last"``: partial rotary on the last features of the head (DeepSeek-V4's
  ``[nope | rope]``); ``direction="negative"``: pairs turn by ``-p·ω`` (nanochat);
* ``rope_type_aliases``: the config's ``rope_type`` names the configuration class renames
  (Phi-3: ``"su"`` and ``"yarn"`` mean ``"longrope"``);
* ``layer_rope_defaults``: ``{layer type: (config key, theta)}``: what the config class fills
  in for a layer type that ``layer_types`` lists and ``rope_parameters`` lacks (Gemma 3: the
  sliding layers get the default rope type with ``rope_local_base_freq``, else 10000);
* ``attn_temperature``: the config class's ``attn_temperature_tuning``, ``floor_scale`` and
  ``attn_scale`` for a family whose code reads them (Llama 4): its rotary encoders carry them
  and give the factors of its NoPE layers' queries through ``enc.query_scale``;
* ``unsupported``: a reason; the family's encoding is not reproduced yet, and saying so beats
  a rotary encoder that looks right (BLT's composite config).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

__all__ = ["MODEL_CONVENTIONS", "conventions_of", "register_model_conventions"]

#: The keys an entry may have, and what each value may be.
_KEYS: dict[str, str] = {
    "layout": "'half' or 'interleaved'",
    "layout_flag": "a (config key, default) pair",
    "mrope_interleaved": "a bool",
    "mrope_section": "a list of pair counts (the model's default when its config has none)",
    "theta": "a number > 0",
    "partial_rotary_factor": "a number in (0, 1]",
    "encoding": "'rotary', 'alibi', 't5', or a function of the config dict returning one",
    "unsupported": "a reason (a string): from_hf_config raises a ConfigError giving it",
    "rope_type_aliases": "a dict {config's rope_type: the type it means}",
    "rotary_features": "'first' or 'last': which rotary_dim features of the head rotate",
    "reads_rotary_dim": "a bool: False when the family's code ignores a config's rotary_dim",
    "mrope_map": "a function of the config's mrope_section returning (sections, pair_axes) "
                 "for mrope: the family's own axis-to-pair map",
    "feature_map": "a function of the config's mrope_section returning (sections, "
                   "feature_axes) for mrope: the family's own axis of every feature",
    "ntk_alpha": "a bool: rope_type 'dynamic' with an 'alpha' means a fixed NTK alpha, "
                 "theta·alpha^(d/(d-2)) (HunYuan)",
    "direction": "'positive' or 'negative': the sign of the rotation angle",
    "no_rope_layer_interval": "a positive integer: every n-th layer is NoPE when "
                              "no_rope_layers is empty",
    "nope_layer_types": "a pair of two different layer type names (RoPE layers', NoPE "
                        "layers'): the layer_types the config class derives from "
                        "no_rope_layers",
    "layer_rope_defaults": "a dict {layer type: (config key, default theta)}: the rope "
                           "parameters the config class fills in for a missing layer type",
    "attn_temperature": "a dict of the config class's attn_temperature_tuning (a bool), "
                        "floor_scale and attn_scale (numbers): the family reads them (Llama 4)",
}


def _baichuan(config: Mapping[str, Any]) -> str:
    # Baichuan-13B and Baichuan2-13B (hidden_size 5120) use ALiBi, the 7B models RoPE: their
    # config.json files do not say so, each size ships its own modeling_baichuan.py.
    return "alibi" if config.get("hidden_size") == 5120 else "rotary"


def _ernie_vl_map(section: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    # Ernie-4.5-VL's mrope_section is (h, w, t); its rotary module gives the first h + w pairs
    # to height and width alternately (inv_freq pre-rotated, then stacked h, w) and the last t
    # pairs to time: M-RoPE sections (t, h, w) over positions (t, h, w) with this pair map.
    h, w, t = section
    return (t, h, w), tuple(1 + j % 2 if j < h + w else 0 for j in range(h + w + t))


def _hunyuan_vl_map(section: list[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    # HunYuan-VL's recomposition_frequencies: cat(freqs, freqs) over the full width, split in
    # chunks of 2·section[k] features, chunk k from axis k; a pair's two features (i, h + i)
    # may fall in different chunks.
    return tuple(section), tuple(k for k, s in enumerate(section) for _ in range(2 * s))


_INTERLEAVED: dict[str, Any] = {"layout": "interleaved"}

# Phi-3's configuration class reads the "su" and "yarn" of older configs as "longrope".
_PHI3: dict[str, Any] = {"rope_type_aliases": {"su": "longrope", "yarn": "longrope"}}

_LLAMA4: dict[str, Any] = {**_INTERLEAVED, "theta": 500000.0, "no_rope_layer_interval": 4,
                           "nope_layer_types": ("chunked_attention", "full_attention"),
                           "attn_temperature": {"attn_temperature_tuning": True,
                                                "floor_scale": 8192, "attn_scale": 0.1}}

_TABLE: dict[str, dict[str, Any]] = {
    "phi4_multimodal": _PHI3,
    # interleaved pairs, verified in transformers 5.23's modeling code
    "gptj": _INTERLEAVED, "codegen": _INTERLEAVED,          # rotate_every_two
    "cohere": {**_INTERLEAVED, "theta": 500000.0},          # rotate_half on x[..., ::2]
    "cohere2": _INTERLEAVED,
    "cohere2_moe": _INTERLEAVED,
    "glm": {**_INTERLEAVED, "partial_rotary_factor": 0.5},  # x[..., 0::2] / x[..., 1::2]
    "glm4": {**_INTERLEAVED, "partial_rotary_factor": 0.5},
    "helium": {**_INTERLEAVED, "theta": 100000.0},
    "ernie4_5": {**_INTERLEAVED, "theta": 500000.0},
    "ernie4_5_moe": {**_INTERLEAVED, "theta": 500000.0},
    # torch.view_as_complex; NoPE every 4th layer unless no_rope_layers says otherwise
    # and the attention temperature of its NoPE layers (Llama4TextConfig's defaults)
    "llama4_text": _LLAMA4,
    "llama4": _LLAMA4,
    "deepseek_v2": _INTERLEAVED,                            # torch.view_as_complex
    # apply_rotary_pos_emb_interleave always (output de-interleaved, as DeepSeek-V3's flag)
    "bailing_hybrid": _INTERLEAVED, "longcat_flash": _INTERLEAVED, "glm_moe_dsa": _INTERLEAVED,
    "dots3_note": _INTERLEAVED, "dots3_note_text": _INTERLEAVED,
    "moonshine": {**_INTERLEAVED, "partial_rotary_factor": 0.9},  # x[..., 0::2] / x[..., 1::2]
    "moonshine_streaming": _INTERLEAVED, "moonshine_streaming_encoder": _INTERLEAVED,
    "openai_privacy_filter": {**_INTERLEAVED, "theta": 150000.0},  # stack(...).flatten(-2)
    **{t: {**_INTERLEAVED, "theta": 500000.0}  # BLT's transformers: x[..., ::2] / x[..., 1::2]
       for t in ("blt_global_transformer", "blt_local_encoder", "blt_local_decoder")},
    "blt": {"unsupported": "a BLT config holds several transformers: pass one of its "
                           "sub-configs (global_config, encoder_config, decoder_config)"},
    # DeepSeek-V3.2's MLA (and AXK2's, its copy); their lightning indexer rotates its own
    # q/k in the half layout (apply_rotary_pos_emb): get_encoder(..., layout="half") for it
    "deepseek_v32": _INTERLEAVED, "axk2": _INTERLEAVED,
    # rope_interleave selects it (apply_rotary_pos_emb_interleave: output de-interleaved, see
    # docs); the config class defaults it to True, which a config.json may leave out
    **{t: {"layout_flag": ("rope_interleave", True)}
       for t in ("deepseek_v3", "glm4_moe_lite", "mistral4", "axk1", "youtu")},
    # M-RoPE interleaved without saying so
    **{t: {"mrope_interleaved": True, "theta": 500000.0, "mrope_section": (24, 20, 20)}
       for t in ("qwen3_vl", "qwen3_vl_text", "qwen3_vl_moe", "qwen3_vl_moe_text")},
    # half-layout rotary families (listed so a config without any rope key still counts)
    "llama": {}, "mistral": {}, "mixtral": {"theta": 1000000.0}, "qwen2": {}, "qwen3": {},
    "qwen2_moe": {}, "qwen3_moe": {}, "gemma": {}, "gemma2": {},
    # Gemma3Config.convert_rope_params_to_dict: a layer type without parameters gets these
    **{t: {"layer_rope_defaults": {"full_attention": ("rope_theta", 1_000_000.0),
                                   "sliding_attention": ("rope_local_base_freq", 10_000.0)}}
       for t in ("gemma3", "gemma3_text", "gemma3n", "gemma3n_text")},
    # ModernBertDecoderConfig likewise, with its own keys and thetas
    "modernbert-decoder": {"layer_rope_defaults": {
        "full_attention": ("global_rope_theta", 160_000.0),
        "sliding_attention": ("local_rope_theta", 10_000.0)}},
    "phi": {"partial_rotary_factor": 0.5}, "phi3": _PHI3, "gpt_neox": {"partial_rotary_factor": 0.25},
    "stablelm": {"partial_rotary_factor": 0.25}, "olmo": {}, "olmo2": {}, "starcoder2": {},
    **{t: {"theta": 1000000.0, "mrope_section": (16, 24, 24)}  # the rotary module's default
       for t in ("qwen2_vl", "qwen2_vl_text", "qwen2_5_vl", "qwen2_5_vl_text",
                 "qwen2_5_omni_text", "qwen2_5_omni_thinker")}, "smollm3": {"no_rope_layer_interval": 4},
    "mistral_large4": {**_INTERLEAVED, "no_rope_layer_interval": 4},  # as deepseek_v3
    "mistral_large4_text": {**_INTERLEAVED, "no_rope_layer_interval": 4},
    "falcon": {}, "persimmon": {"partial_rotary_factor": 0.5}, "granite": {}, "internlm2": {},
    # M-RoPE with partial rotary and Qwen3-VL's interleaved axes (recomposition_frequencies)
    **{t: {"mrope_interleaved": True, "mrope_section": (11, 11, 10)}
       for base in ("qwen3_5", "qwen3_5_moe", "qwen4_exp") for t in (base, f"{base}_text")},
    **{t: {"mrope_interleaved": True, "mrope_section": (24, 20, 20)}
       for t in ("cosmos3_edge", "cosmos3_edge_text")},
    # GLM-4V: contiguous M-RoPE bands, pairs (2i, 2i+1) (repeat_interleave, rotate_half_llm)
    **{t: {**_INTERLEAVED, "mrope_section": (8, 12, 12)}
       for base in ("glm4v", "glm_ocr") for t in (base, f"{base}_text")},
    **{t: {"mrope_section": (8, 12, 12)} for t in ("glm4v_moe", "glm4v_moe_text")},
    # M-RoPE variants peregistry does not have yet (their own axis maps), or whose conventions
    # were not checked against the model's code
    **{t: {"mrope_section": (8, 12, 12)} for t in ("glm_image", "glm_image_text")},
    **{t: {**_INTERLEAVED, "theta": 500000.0, "mrope_section": (22, 22, 20),
           "mrope_map": _ernie_vl_map} for t in ("ernie4_5_vl_moe", "ernie4_5_vl_moe_text")},
    # XD-RoPE: the full-width tables split by axis (mrope feature_axes); its checkpoints say
    # "xdrope" (the config class reads "dynamic") with a fixed NTK alpha
    **{t: {"feature_map": _hunyuan_vl_map, "ntk_alpha": True,
           "rope_type_aliases": {"xdrope": "dynamic"}} for t in ("hunyuan_vl", "hunyuan_vl_text")},
    **{t: {"ntk_alpha": True} for t in ("hunyuan_v1_dense", "hunyuan_v1_moe")},
    **{t: {"mrope_section": (16, 24, 24)} for t in ("paddleocr_vl", "paddleocr_vl_text")},
    **{t: {"mrope_interleaved": True, "mrope_section": (24, 20, 20)}
       for base in ("cohere_compass", "qwen3_omni_moe") for t in (base, f"{base}_text")},
    # MiniMax-M3's config has rotary_dim, which its rotary module does not read
    **{t: {"reads_rotary_dim": False} for t in ("minimax_m3_vl", "minimax_m3_vl_text")},
    # the rotation's other conventions
    "nanochat": {"direction": "negative"},                  # rotate_half returns [x2, -x1]
    "deepseek_v4": {**_INTERLEAVED, "rotary_features": "last"},  # x[..., -rope_dim:]
    # other positional encodings
    "bloom": {"encoding": "alibi"}, "baichuan": {"encoding": _baichuan},
    "t5": {"encoding": "t5"}, "mt5": {"encoding": "t5"}, "umt5": {"encoding": "t5"},
    "longt5": {"encoding": "t5"}, "switch_transformers": {"encoding": "t5"},
}

#: ``model_type`` → conventions (read-only; extend with :func:`register_model_conventions`).
MODEL_CONVENTIONS: Mapping[str, Mapping[str, Any]] = MappingProxyType(_TABLE)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_CHECKS: dict[str, Callable[[Any], bool]] = {
    "layout": lambda v: v in ("half", "interleaved"),
    "layout_flag": lambda v: isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str),
    "mrope_interleaved": lambda v: isinstance(v, bool),
    "mrope_section": lambda v: isinstance(v, (list, tuple)) and all(
        isinstance(x, int) and x >= 0 for x in v),
    "theta": lambda v: _is_number(v) and v > 0,
    "partial_rotary_factor": lambda v: _is_number(v) and 0 < v <= 1,
    "encoding": lambda v: callable(v) or v in ("rotary", "alibi", "t5"),
    "unsupported": lambda v: isinstance(v, str) and bool(v),
    "no_rope_layer_interval": lambda v: isinstance(v, int) and v > 0,
    "nope_layer_types": lambda v: isinstance(v, tuple) and len(v) == 2 and all(
        isinstance(t, str) and t for t in v) and v[0] != v[1],
    "layer_rope_defaults": lambda v: isinstance(v, Mapping) and all(
        isinstance(k, str) and isinstance(r, tuple) and len(r) == 2 and isinstance(r[0], str)
        and _is_number(r[1]) and r[1] > 0 for k, r in v.items()),
    "attn_temperature": lambda v: isinstance(v, Mapping) and set(v) == {
        "attn_temperature_tuning", "floor_scale", "attn_scale"} and isinstance(
        v["attn_temperature_tuning"], bool) and _is_number(v["floor_scale"])
        and v["floor_scale"] > 0 and _is_number(v["attn_scale"]),
    "rotary_features": lambda v: v in ("first", "last"),
    "reads_rotary_dim": lambda v: isinstance(v, bool),
    "mrope_map": callable,
    "feature_map": callable,
    "ntk_alpha": lambda v: isinstance(v, bool),
    "direction": lambda v: v in ("positive", "negative"),
    "rope_type_aliases": lambda v: isinstance(v, Mapping) and all(
        isinstance(k, str) and isinstance(t, str) for k, t in v.items()),
}


def _check(model_type: str, key: str, value: Any) -> None:
    if not _CHECKS[key](value):
        raise ValueError(f"register_model_conventions({model_type!r}): {key}={value!r}; "
                         f"expected {_KEYS[key]}")


def register_model_conventions(model_type: str, *, replace: bool = False,
                               **conventions: Any) -> None:
    """Teach :func:`~peregistry.hf_config.from_hf_config` what ``model_type``'s config leaves
    unsaid, e.g. ``register_model_conventions("my_model", layout="interleaved")``.

    Keys: ``layout``, ``layout_flag``, ``mrope_interleaved``, ``mrope_section``,
    ``mrope_map``, ``feature_map``, ``ntk_alpha``, ``theta``, ``partial_rotary_factor``, ``reads_rotary_dim``,
    ``rotary_features``, ``direction``, ``encoding``, ``no_rope_layer_interval``,
    ``nope_layer_types``, ``layer_rope_defaults``, ``attn_temperature``, ``rope_type_aliases``, ``unsupported``
    (see :mod:`peregistry.hf_config`). An entry that
    exists already is updated key by key; ``replace=True`` replaces it whole. Unknown keys and
    bad values raise ``ValueError`` naming them."""
    if not isinstance(model_type, str) or not model_type:
        raise ValueError(f"register_model_conventions: model_type must be a non-empty string, "
                         f"got {model_type!r}")
    unknown = sorted(set(conventions) - set(_KEYS))
    if unknown:
        raise ValueError(f"register_model_conventions({model_type!r}): unknown key"
                         f"{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                         f"known: {', '.join(_KEYS)}")
    for key, value in conventions.items():
        _check(model_type, key, value)
    base = {} if replace else dict(_TABLE.get(model_type, {}))
    _TABLE[model_type] = {**base, **conventions}


def unregister_model_conventions(model_type: str) -> None:
    """Remove ``model_type``'s entry (tests, notebooks); a missing entry is not an error."""
    _TABLE.pop(model_type, None)


def conventions_of(model_type: str | None) -> Mapping[str, Any]:
    """The entry of ``model_type`` (empty when the table has none)."""
    return _TABLE.get(model_type or "", {})


def encoding_of(model_type: str | None, config: Mapping[str, Any]) -> str | None:
    """The entry's ``encoding`` for ``config`` (None when the entry does not say)."""
    value: str | Callable[[Mapping[str, Any]], str] | None = conventions_of(model_type).get(
        "encoding")
    return value(config) if callable(value) else value
